package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// InUseFinalizer keeps a PillarStore, and the PillarAgent of its storage
// node, while a volume lives on the store: without them no call could
// reach the volume again, nor delete it.
const InUseFinalizer = "pillar-csi.io/in-use"

// inUseRecheck is how often a deletion that waits looks again, besides
// the wake-up a volume's deletion sends.
const inUseRecheck = time.Minute

// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarvolumestates;pillarsnapshotstates,verbs=get;list;watch

// volumesOn lists the volumes and snapshots ("snapshot NAME") whose record
// names one of stores, read from the API server: the cache may not show a
// volume created a moment ago, and a finalizer dropped on its word could
// not be put back. A snapshot outlives its source volume, so it holds its
// store on its own.
func volumesOn(ctx context.Context, r client.Reader, stores ...string) ([]string, error) {
	var l v1alpha1.PillarVolumeStateList
	if err := r.List(ctx, &l); err != nil {
		return nil, err
	}
	var out []string
	for _, v := range l.Items {
		if slices.Contains(stores, string(v.Spec.StoreName)) {
			out = append(out, v.Name)
		}
	}
	var sl v1alpha1.PillarSnapshotStateList
	if err := r.List(ctx, &sl); err != nil {
		return nil, err
	}
	for _, sn := range sl.Items {
		if slices.Contains(stores, string(sn.Spec.StoreName)) {
			out = append(out, "snapshot "+sn.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ensureInUseFinalizer adds InUseFinalizer to a live object that lacks it.
func ensureInUseFinalizer(ctx context.Context, c client.Client, o client.Object) error {
	if !o.GetDeletionTimestamp().IsZero() || controllerutil.ContainsFinalizer(o, InUseFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(o, InUseFinalizer)
	return c.Patch(ctx, o, patch)
}

// releaseInUse drops InUseFinalizer from an object being deleted.
func releaseInUse(ctx context.Context, c client.Client, o client.Object) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(o, InUseFinalizer) {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(o, InUseFinalizer)
	return result(c.Patch(ctx, o, patch))
}

// waitsFor is the Ready verdict of a deletion held back by volumes.
func waitsFor(kind string, vols []string) verdict {
	const shown = 5
	names := strings.Join(vols[:min(len(vols), shown)], ", ")
	if len(vols) > shown {
		names += fmt.Sprintf(" and %d more", len(vols)-shown)
	}
	return notReady(v1alpha1.ReasonDeletionWaitsForVolumes, "the deletion waits until no volume or snapshot lives on this %s: %d still do (%s). Delete their PersistentVolumeClaims "+
		"and VolumeSnapshots; a PersistentVolume with reclaim policy Retain keeps its volume until its policy is set to Delete, a VolumeSnapshotContent with "+
		"deletionPolicy Retain its snapshot. kubectl get pillar-volumes lists them", kind, len(vols), names)
}
