package controller

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// claimLookupTimeout bounds the read of a volume's claim for an event, so
// an event never holds a CSI call up for long.
const claimLookupTimeout = 5 * time.Second

// recordEvent records an event on the volume's PillarVolumeState and, when
// the volume was created for a claim that still exists, on the claim as
// well, naming the volume: `kubectl describe pvc` is where users look
// first, and the record is where operators look. The claim's event carries
// its UID (kubectl describe selects events by it); a claim of the same name
// bound to another volume gets nothing.
func recordEvent(rec events.EventRecorder, reader client.Reader, log *slog.Logger, v *v1alpha1.PillarVolumeState, typ, reason, action, format string, args ...any) {
	if rec == nil {
		return
	}
	rec.Eventf(v, nil, typ, reason, action, format, args...)
	ns, name := v.Annotations[AnnotationPVCNamespace], v.Annotations[AnnotationPVCName]
	if name == "" || ns == "" || reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimLookupTimeout)
	defer cancel()
	var pvc corev1.PersistentVolumeClaim
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pvc); err != nil {
		log.Debug("no event on the claim", "volume_id", v.Name, "pvc", ns+"/"+name, "error", err)
		return
	}
	if pvc.Spec.VolumeName != "" && pvc.Spec.VolumeName != v.Annotations[AnnotationPVName] {
		return
	}
	rec.Eventf(&pvc, v, typ, reason, action, "volume %s: %s", v.Name, fmt.Sprintf(format, args...))
}
