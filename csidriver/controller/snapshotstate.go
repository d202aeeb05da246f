package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshotcontents,verbs=get

// volumeSnapshotContent is the kind a snapshot's record names in its
// annotation (the external-snapshotter's CRD).
var volumeSnapshotContent = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotContent"}

// SnapshotStateReconciler rolls back a snapshot whose CreateSnapshot never
// completed and whose VolumeSnapshotContent is gone: no CO will ever
// delete it, and it would hold space on the storage node for nothing.
type SnapshotStateReconciler struct {
	Service  *Service
	Recorder events.EventRecorder
	// AbandonAfter; DefaultAbandonAfter if zero.
	AbandonAfter time.Duration
	// Now; time.Now if nil.
	Now func() time.Time
}

// Setup registers the reconciler with mgr.
func (r *SnapshotStateReconciler) Setup(mgr manager.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("pillarsnapshotstate").
		For(&v1alpha1.PillarSnapshotState{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *SnapshotStateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := r.Service
	sn, err := s.getSnapshot(ctx, req.Name)
	if err != nil || sn == nil || !sn.DeletionTimestamp.IsZero() || sn.Status.ReadyToUse {
		return ctrl.Result{}, err
	}
	content := sn.Annotations[v1alpha1.AnnotationVolumeSnapshotContentName]
	if content == "" {
		return ctrl.Result{}, nil // not made for a VolumeSnapshot: never judged abandoned
	}
	after, wait := abandonWait(sn.CreationTimestamp, r.AbandonAfter, r.Now)
	if wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	var c metav1.PartialObjectMetadata
	c.SetGroupVersionKind(volumeSnapshotContent)
	err = s.cfg.Reader.Get(ctx, types.NamespacedName{Name: content}, &c)
	switch {
	case err == nil, meta.IsNoMatchError(err):
		// Still there, or the cluster no longer serves the CRD: nothing
		// tells that the snapshot was abandoned.
		return ctrl.Result{RequeueAfter: after}, nil
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	unlock, err := s.lockKey(snapshotLock(sn.Name), "snapshot "+sn.Name)
	if err != nil {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	defer unlock()
	if r.Recorder != nil {
		r.Recorder.Eventf(sn, nil, corev1.EventTypeWarning, v1alpha1.ReasonSnapshotAbandoned, "Reconcile",
			"CreateSnapshot never completed and its VolumeSnapshotContent %s no longer exists: rolling the snapshot back", content)
	}
	if err := s.rollBackSnapshot(ctx, sn); err != nil {
		return ctrl.Result{}, fmt.Errorf("rolling back abandoned snapshot %s: %w", sn.Name, err)
	}
	s.log.Info("abandoned snapshot rolled back", "snapshot_id", sn.Name, "volumesnapshotcontent", content)
	return ctrl.Result{}, nil
}
