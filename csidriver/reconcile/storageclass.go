package reconcile

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
)

// Finalizer keeps a PillarStorageClass until its StorageClass is deleted.
const Finalizer = "pillar-csi.io/storageclass"

// ManagedByLabel marks the StorageClasses pillar-controller generates.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "pillar-controller"
)

// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarstorageclasses,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarstorageclasses/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarstorageclasses/finalizers,verbs=update
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch;create;update;patch;delete

// StorageClassReconciler keeps the StorageClass generated from each
// PillarStorageClass: it creates it, puts back what someone changed or
// deleted, never takes over a StorageClass it did not create, and deletes
// it with the PillarStorageClass.
type StorageClassReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// Reconcile implements reconcile.Reconciler.
func (r *StorageClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p v1alpha1.PillarStorageClass
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return result(r.finalize(ctx, &p))
	}
	if !controllerutil.ContainsFinalizer(&p, Finalizer) {
		patch := client.MergeFrom(p.DeepCopy())
		controllerutil.AddFinalizer(&p, Finalizer)
		if err := r.Client.Patch(ctx, &p, patch); err != nil {
			return result(err)
		}
	}
	before := p.Status.DeepCopy()
	v, err := r.sync(ctx, &p)
	if err != nil {
		return result(err)
	}
	transition := setReady(&p.Status.Conditions, v, p.Generation)
	p.Status.ObservedGeneration = p.Generation
	if err := writeStatus(ctx, r.Client, &p, before, &p.Status); err != nil {
		return result(err)
	}
	if transition {
		announce(r.Recorder, &p, v)
	}
	return ctrl.Result{}, nil
}

// desired is the StorageClass p stands for.
func desired(p *v1alpha1.PillarStorageClass) *storagev1.StorageClass {
	fs := p.Spec.FSType
	if fs == "" {
		fs = v1alpha1.FSTypeExt4
	}
	reclaim := corev1.PersistentVolumeReclaimPolicy(p.Spec.ReclaimPolicy)
	if reclaim == "" {
		reclaim = corev1.PersistentVolumeReclaimDelete
	}
	binding := storagev1.VolumeBindingMode(p.Spec.VolumeBindingMode)
	if binding == "" {
		binding = storagev1.VolumeBindingImmediate
	}
	expand := p.Spec.AllowVolumeExpansion == nil || *p.Spec.AllowVolumeExpansion
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:   p.Name,
			Labels: map[string]string{ManagedByLabel: ManagedByValue},
		},
		Provisioner: driver.Name,
		Parameters: map[string]string{
			v1alpha1.StorageClassParamStore:    string(p.Spec.StoreName),
			v1alpha1.StorageClassParamProtocol: string(p.Spec.ProtocolName),
			v1alpha1.StorageClassParamFSType:   string(fs),
		},
		ReclaimPolicy:        &reclaim,
		VolumeBindingMode:    &binding,
		AllowVolumeExpansion: &expand,
		MountOptions:         slices.Clone(p.Spec.MountOptions),
	}
	if p.Spec.MultiNodeBlockWriters {
		// Only when on: the classes of every other PillarStorageClass keep
		// the parameters they were made with (they are immutable).
		sc.Parameters[v1alpha1.StorageClassParamMultiNodeBlockWriters] = "true"
	}
	return sc
}

// sync makes the StorageClass match p and judges p's references.
func (r *StorageClassReconciler) sync(ctx context.Context, p *v1alpha1.PillarStorageClass) (verdict, error) {
	want := desired(p)
	if err := controllerutil.SetControllerReference(p, want, r.Client.Scheme()); err != nil {
		return verdict{}, err
	}
	var sc storagev1.StorageClass
	err := r.Client.Get(ctx, types.NamespacedName{Name: want.Name}, &sc)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return verdict{}, err // created meanwhile: look again
			}
			return notReady(v1alpha1.ReasonStorageClassError, "cannot create StorageClass %q: %v", want.Name, err), nil
		}
		if p.Status.StorageClassName != "" {
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, v1alpha1.ReasonStorageClassRecreated, "Reconcile",
				"StorageClass %q was deleted by someone else; created it again", want.Name)
		} else {
			r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, v1alpha1.ReasonStorageClassCreated, "Reconcile", "created StorageClass %q", want.Name)
		}
	case err != nil:
		return verdict{}, err
	case !metav1.IsControlledBy(&sc, p):
		p.Status.StorageClassName = ""
		return notReady(v1alpha1.ReasonConflict, "StorageClass %q already exists and was not created by this PillarStorageClass; pillar-controller does not take it over: delete or rename it, or name this PillarStorageClass differently", sc.Name), nil
	case !sameImmutable(&sc, want):
		return refuseChange("PillarStorageClass", []string{fmt.Sprintf(
			"the spec no longer matches StorageClass %q (provisioner %s, parameters %v, reclaimPolicy %s, volumeBindingMode %s), whose fields Kubernetes does not let change",
			sc.Name, sc.Provisioner, sc.Parameters, deref(sc.ReclaimPolicy), deref(sc.VolumeBindingMode))}), nil
	case !sameMutable(&sc, want):
		sc.Labels = mergeLabels(sc.Labels, want.Labels)
		sc.AllowVolumeExpansion = want.AllowVolumeExpansion
		sc.MountOptions = want.MountOptions
		if err := r.Client.Update(ctx, &sc); err != nil {
			return verdict{}, err
		}
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, v1alpha1.ReasonStorageClassUpdated, "Reconcile",
			"StorageClass %q updated to match the spec (allowVolumeExpansion, mountOptions, labels)", sc.Name)
	}
	p.Status.StorageClassName = want.Name
	return r.references(ctx, p), nil
}

// references judges the store and the protocol p names.
func (r *StorageClassReconciler) references(ctx context.Context, p *v1alpha1.PillarStorageClass) verdict {
	var s v1alpha1.PillarStore
	if err := r.Client.Get(ctx, types.NamespacedName{Name: string(p.Spec.StoreName)}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return notReady(v1alpha1.ReasonStoreNotFound, "StorageClass %q is in place, but PillarStore %q does not exist: volumes cannot be created until it does", p.Name, p.Spec.StoreName)
		}
		return notReady(v1alpha1.ReasonStoreNotFound, "cannot read PillarStore %q: %v", p.Spec.StoreName, err)
	}
	switch c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); {
	case c == nil:
		return pending(v1alpha1.ReasonStoreNotReady, "StorageClass %q is in place; PillarStore %q has not been reconciled yet", p.Name, s.Name)
	case c.Status != metav1.ConditionTrue:
		return notReady(v1alpha1.ReasonStoreNotReady, "StorageClass %q is in place, but PillarStore %q is not ready (%s: %s)", p.Name, s.Name, c.Reason, c.Message)
	}
	var proto v1alpha1.PillarProtocol
	if err := r.Client.Get(ctx, types.NamespacedName{Name: string(p.Spec.ProtocolName)}, &proto); err != nil {
		if apierrors.IsNotFound(err) {
			return notReady(v1alpha1.ReasonProtocolNotFound, "StorageClass %q is in place, but PillarProtocol %q does not exist: volumes cannot be created until it does", p.Name, p.Spec.ProtocolName)
		}
		return notReady(v1alpha1.ReasonProtocolNotFound, "cannot read PillarProtocol %q: %v", p.Spec.ProtocolName, err)
	}
	switch c := meta.FindStatusCondition(proto.Status.Conditions, v1alpha1.ConditionReady); {
	case c == nil:
		return pending(v1alpha1.ReasonProtocolNotReady, "StorageClass %q is in place; PillarProtocol %q has not been reconciled yet", p.Name, proto.Name)
	case c.Status != metav1.ConditionTrue:
		return notReady(v1alpha1.ReasonProtocolNotReady, "StorageClass %q is in place, but PillarProtocol %q is not ready (%s: %s)", p.Name, proto.Name, c.Reason, c.Message)
	}
	return ready(v1alpha1.ReasonInSync, "StorageClass %q provisions from PillarStore %q, exported with PillarProtocol %q", p.Name, s.Name, proto.Name)
}

// finalize deletes the generated StorageClass (only if it is ours), then
// lets the PillarStorageClass go.
func (r *StorageClassReconciler) finalize(ctx context.Context, p *v1alpha1.PillarStorageClass) error {
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		return nil
	}
	var sc storagev1.StorageClass
	err := r.Client.Get(ctx, types.NamespacedName{Name: p.Name}, &sc)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case metav1.IsControlledBy(&sc, p):
		if err := r.Client.Delete(ctx, &sc, client.Preconditions{UID: &sc.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, v1alpha1.ReasonStorageClassDeleted, "Finalize", "deleted StorageClass %q", sc.Name)
	}
	patch := client.MergeFrom(p.DeepCopy())
	controllerutil.RemoveFinalizer(p, Finalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, p, patch))
}

// sameImmutable compares what Kubernetes forbids changing on a
// StorageClass.
func sameImmutable(have, want *storagev1.StorageClass) bool {
	return have.Provisioner == want.Provisioner && maps.Equal(have.Parameters, want.Parameters) &&
		deref(have.ReclaimPolicy) == deref(want.ReclaimPolicy) && deref(have.VolumeBindingMode) == deref(want.VolumeBindingMode)
}

func sameMutable(have, want *storagev1.StorageClass) bool {
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	return deref(have.AllowVolumeExpansion) == deref(want.AllowVolumeExpansion) &&
		slices.Equal(have.MountOptions, want.MountOptions)
}

func mergeLabels(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
