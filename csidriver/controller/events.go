package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

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
// bound to another volume gets nothing. Finding the claim is a read from
// the API server, so it runs off the caller's path, in order (claims).
func (s *Service) recordEvent(rec events.EventRecorder, v *v1alpha1.PillarVolumeState, typ, reason, action, format string, args ...any) {
	if rec == nil {
		return
	}
	rec.Eventf(v, nil, typ, reason, action, format, args...)
	ns, name := v.Annotations[AnnotationPVCNamespace], v.Annotations[AnnotationPVCName]
	if name == "" || ns == "" || s.cfg.Reader == nil {
		return
	}
	v = v.DeepCopy()
	note := fmt.Sprintf(format, args...)
	s.claims.add(s.log, func() {
		ctx, cancel := context.WithTimeout(context.Background(), claimLookupTimeout)
		defer cancel()
		var pvc corev1.PersistentVolumeClaim
		if err := s.cfg.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pvc); err != nil {
			s.log.Debug("no event on the claim", "volume_id", v.Name, "pvc", ns+"/"+name, "error", err)
			return
		}
		if pvc.Spec.VolumeName != "" && pvc.Spec.VolumeName != v.Annotations[AnnotationPVName] {
			return
		}
		rec.Eventf(&pvc, v, typ, reason, action, "volume %s: %s", v.Name, note)
	})
}

// maxQueuedClaimEvents bounds the claims' events waiting for their claim to
// be read; past it an event is dropped (and logged): events are for
// people, and an API server that slow has other news for them.
const maxQueuedClaimEvents = 1024

// eventQueue runs the claims' events one at a time, in the order they were
// raised, on a goroutine that lives while there is work.
type eventQueue struct {
	mu      sync.Mutex
	pending []func()
	running bool
}

func (q *eventQueue) add(log *slog.Logger, f func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) >= maxQueuedClaimEvents {
		log.Warn("an event for a claim was dropped: too many are waiting for their claim to be read", "waiting", len(q.pending))
		return
	}
	q.pending = append(q.pending, f)
	if !q.running {
		q.running = true
		go q.drain()
	}
}

func (q *eventQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		f := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		q.mu.Unlock()
		f()
	}
}

// idle reports whether every event raised so far was made (or dropped).
func (q *eventQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.running
}
