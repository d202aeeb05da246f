package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// AnnotationPVName names the PersistentVolume a volume was created for
// (the external-provisioner's csi.storage.k8s.io/pv/name).
const AnnotationPVName = v1alpha1.AnnotationPVName

// DefaultAbandonAfter is how long a volume whose CreateVolume never
// completed may wait for its claim before it is rolled back.
const DefaultAbandonAfter = 10 * time.Minute

// recoveryDoc is where an operator reads how to state a legacy volume's
// export.
const recoveryDoc = "the ExportSpecMissing recovery procedure of docs/troubleshooting.md (deploy/examples/recovery/export-spec-patch.yaml)"

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims;persistentvolumes,verbs=get

// VolumeStateReconciler watches PillarVolumeStates for what no CSI call
// will come to fix: a record without an export spec (ExportSpecMissing,
// which the operator must state; the controller never guesses it) and a
// provisioning that was abandoned (the CreateVolume never completed and
// its claim is gone, so no CO will ever delete it), which it rolls back.
type VolumeStateReconciler struct {
	Service  *Service
	Recorder events.EventRecorder
	// AbandonAfter; DefaultAbandonAfter if zero.
	AbandonAfter time.Duration
	// Now; time.Now if nil.
	Now func() time.Time
}

// Setup registers the reconciler with mgr.
func (r *VolumeStateReconciler) Setup(mgr manager.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("pillarvolumestate").
		For(&v1alpha1.PillarVolumeState{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *VolumeStateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := r.Service
	// The informer cache tells whether there is anything to do, which in
	// a burst of claims is nearly always nothing (a new record waits for
	// its export, a finished one needs nothing): no read of the API
	// server for those. What is done starts from the record read fresh.
	var cached v1alpha1.PillarVolumeState
	if err := s.cfg.Client.Get(ctx, req.NamespacedName, &cached); err != nil {
		return ctrl.Result{}, client404(err)
	}
	if res, idle := r.idle(&cached); idle {
		return res, nil
	}
	v, err := s.getVolume(ctx, req.Name)
	if err != nil || v == nil {
		return ctrl.Result{}, err
	}
	if !v.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if err := r.exportSpec(ctx, v); err != nil {
		if apierrors.IsConflict(err) {
			// Changed meanwhile (a CSI call recorded a step): again.
			return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	// The same decision on the current record, its condition now
	// written: is the provisioning incomplete, and old enough to be
	// judged abandoned?
	if res, idle := r.idle(v); idle {
		return res, nil
	}
	after, _ := abandonWait(v.CreationTimestamp, r.AbandonAfter, r.Now)
	abandoned, why, err := r.abandoned(ctx, v)
	if err != nil || !abandoned {
		return ctrl.Result{RequeueAfter: after}, err
	}
	unlock, err := s.lock(v.Name)
	if err != nil {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	defer unlock()
	r.event(v, corev1.EventTypeWarning, v1alpha1.ReasonProvisioningAbandoned, "CreateVolume never completed and %s: rolling the volume back", why)
	if err := s.cfg.Client.Delete(ctx, v); client404(err) != nil {
		return ctrl.Result{}, err
	}
	err = s.retrying(ctx, v.Name, func(v *v1alpha1.PillarVolumeState) error {
		if v == nil {
			return nil
		}
		return s.teardown(ctx, v)
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	s.log.Info("abandoned provisioning rolled back", "volume_id", v.Name, "pvc", v.Annotations[AnnotationPVCNamespace]+"/"+v.Annotations[AnnotationPVCName])
	return ctrl.Result{}, nil
}

// idle reports whether v needs nothing now, and then when to look again:
// either it is being deleted, or its ExportSpecMissing condition is true
// to its spec and it is exported, has no export spec (the operator states
// it) or is too young to be judged abandoned.
func (r *VolumeStateReconciler) idle(v *v1alpha1.PillarVolumeState) (ctrl.Result, bool) {
	if !v.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, true
	}
	if _, write := exportCondition(v); write {
		return ctrl.Result{}, false
	}
	if v.Status.Exported || v.Spec.Export == nil {
		return ctrl.Result{}, true
	}
	if _, wait := abandonWait(v.CreationTimestamp, r.AbandonAfter, r.Now); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, true
	}
	return ctrl.Result{}, false
}

// abandonWait is how long a record made at created still waits before it
// may be judged abandoned (zero or less: now), and after, the wait it is
// given: AbandonAfter, or DefaultAbandonAfter when zero; now is time.Now
// when nil.
func abandonWait(created metav1.Time, after time.Duration, now func() time.Time) (time.Duration, time.Duration) {
	if after <= 0 {
		after = DefaultAbandonAfter
	}
	if now == nil {
		now = time.Now
	}
	return after, created.Add(after).Sub(now())
}

// exportCondition is the ExportSpecMissing condition true to v's spec,
// and whether v's status must be written to carry it.
func exportCondition(v *v1alpha1.PillarVolumeState) (metav1.Condition, bool) {
	missing := v.Spec.Export == nil
	c := metav1.Condition{Type: v1alpha1.ConditionExportSpecMissing, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonExportSpecStated,
		Message: "the export spec is recorded", ObservedGeneration: v.Generation}
	if missing {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonExportSpecMissing
		c.Message = fmt.Sprintf("this volume's record has no spec.export (it was created by a release that did not record it); pillar-controller never guesses "+
			"bindAddress, port and aclEnabled: state them as %s, and the volume resumes", recoveryDoc)
	}
	old := meta.FindStatusCondition(v.Status.Conditions, c.Type)
	if old != nil && old.Status == c.Status && old.Reason == c.Reason && old.ObservedGeneration == c.ObservedGeneration {
		return c, false
	}
	// A record that never lacked the spec has no condition to clear.
	return c, old != nil || missing
}

// exportSpec keeps the ExportSpecMissing condition true to the spec.
func (r *VolumeStateReconciler) exportSpec(ctx context.Context, v *v1alpha1.PillarVolumeState) error {
	c, write := exportCondition(v)
	if !write {
		return nil
	}
	missing := v.Spec.Export == nil
	meta.SetStatusCondition(&v.Status.Conditions, c)
	if err := client404(r.Service.cfg.Client.Status().Update(ctx, v)); err != nil {
		return err
	}
	if missing {
		r.event(v, corev1.EventTypeWarning, v1alpha1.ReasonExportSpecMissing, "%s", c.Message)
	} else {
		r.event(v, corev1.EventTypeNormal, v1alpha1.ReasonExportSpecStated, "the export spec is recorded: the volume resumes")
	}
	return nil
}

// abandoned reports whether the claim this volume was created for is gone
// and no PersistentVolume holds it. A volume created without claim
// metadata is never judged abandoned.
func (r *VolumeStateReconciler) abandoned(ctx context.Context, v *v1alpha1.PillarVolumeState) (bool, string, error) {
	ns, name := v.Annotations[AnnotationPVCNamespace], v.Annotations[AnnotationPVCName]
	if name == "" {
		return false, "", nil
	}
	reader := r.Service.cfg.Reader
	if pv := v.Annotations[AnnotationPVName]; pv != "" {
		var p corev1.PersistentVolume
		err := reader.Get(ctx, types.NamespacedName{Name: pv}, &p)
		if err == nil {
			return false, "", nil
		}
		if !apierrors.IsNotFound(err) {
			return false, "", err
		}
	}
	var pvc corev1.PersistentVolumeClaim
	err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pvc)
	switch {
	case err == nil:
		return false, "", nil
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("its claim %s/%s no longer exists", ns, name), nil
	}
	return false, "", err
}

func (r *VolumeStateReconciler) event(v *v1alpha1.PillarVolumeState, typ, reason, format string, args ...any) {
	r.Service.recordEvent(r.Recorder, v, typ, reason, "Reconcile", format, args...)
}
