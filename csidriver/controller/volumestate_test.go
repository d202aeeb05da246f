package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
)

func reconcileOnce(t *testing.T, r *controller.VolumeStateReconciler, id string) {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: id}}); err != nil {
		t.Fatal(err)
	}
}

// legacyRecord makes the volume id on the agent and its record as a
// release before the export spec made it: created, with no spec.export.
func legacyRecord(t *testing.T, id string) *v1alpha1.PillarVolumeState {
	t.Helper()
	ctx := context.Background()
	agent.SeedVolume(id, "tank", 8<<20)
	v := &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: id, Finalizers: []string{controller.Finalizer}},
		Spec: v1alpha1.PillarVolumeStateSpec{VolumeID: id, StoreName: storeName, CapacityBytes: 8 << 20}}
	if err := cluster.Admin.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	v.Status.BackendCreated, v.Status.CapacityBytes = true, 8<<20
	if err := cluster.Admin.Status().Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestExportSpecMissing: a legacy record without an export spec gets the
// condition and its calls are refused with a pointer to the recovery
// procedure; once the operator states the spec, the volume resumes.
func TestExportSpecMissing(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	rec := events.NewFakeRecorder(16)
	r := &controller.VolumeStateReconciler{Service: s, Recorder: rec}
	id := uniq("pvc-legacy")
	legacyRecord(t, id)
	reconcileOnce(t, r, id)
	c := meta.FindStatusCondition(record(t, id).Status.Conditions, v1alpha1.ConditionExportSpecMissing)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "never guesses") || !strings.Contains(c.Message, "export-spec-patch.yaml") {
		t.Fatalf("condition = %+v", c)
	}
	if e := <-rec.Events; !strings.HasPrefix(e, "Warning ExportSpecMissing") {
		t.Errorf("event %q", e)
	}
	_, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo})
	wantCode(t, "publish without an export spec", err, codes.FailedPrecondition, "ExportSpecMissing", "docs/troubleshooting.md")
	if _, ok := agent.Exports()[id]; ok {
		t.Fatal("an export was made without a stated spec")
	}

	// The operator states it (the recovery patch).
	v := record(t, id)
	v.Spec.Export = &v1alpha1.ExportSpec{BindAddress: "192.0.2.30", Port: 4421, ACLEnabled: ptr.To(true)}
	if err := cluster.Admin.Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, id)
	if c := meta.FindStatusCondition(record(t, id).Status.Conditions, v1alpha1.ConditionExportSpecMissing); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("condition after the patch = %+v", c)
	}
	if _, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo}); err != nil {
		t.Fatalf("publish after the patch: %v", err)
	}
	if e, ok := agent.Exports()[id]; !ok || len(e.Hosts) != 1 {
		t.Errorf("export after the patch = %+v, %v", e, ok)
	}
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}

// TestAbandonedProvisioning: a CreateVolume that never completed, whose
// claim is gone, is rolled back; one whose claim exists is left alone.
func TestAbandonedProvisioning(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	rec := events.NewFakeRecorder(16)
	r := &controller.VolumeStateReconciler{Service: s, Recorder: rec, AbandonAfter: time.Nanosecond}
	ns := uniq("team-b")
	if err := cluster.Admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	kept := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resourceQuantity("8Mi")}}}}
	if err := cluster.Admin.Create(ctx, kept); err != nil {
		t.Fatal(err)
	}
	half := func(pvc string) string {
		id := uniq("pvc-abandoned")
		req := createReq(id, 8<<20)
		req.Parameters["csi.storage.k8s.io/pvc/name"], req.Parameters["csi.storage.k8s.io/pvc/namespace"] = pvc, ns
		agent.FailNext("ExportVolume", status.Error(codes.Unavailable, "injected"))
		if _, err := s.CreateVolume(ctx, req); status.Code(err) != codes.Unavailable {
			t.Fatalf("half a create: %v", err)
		}
		return id
	}
	gone, alive := half("deleted-claim"), half("kept")
	reconcileOnce(t, r, gone)
	reconcileOnce(t, r, alive)
	if _, ok := agent.Volumes()[gone]; ok {
		t.Error("the abandoned volume is still on the agent")
	}
	eventually(t, func() error {
		var v v1alpha1.PillarVolumeState
		if err := cluster.Admin.Get(ctx, types.NamespacedName{Name: gone}, &v); err == nil {
			return errString("the abandoned record is still there")
		}
		return nil
	})
	if e := <-rec.Events; !strings.Contains(e, "ProvisioningAbandoned") || !strings.Contains(e, ns+"/deleted-claim") {
		t.Errorf("event %q", e)
	}
	if _, ok := agent.Volumes()[alive]; !ok || record(t, alive).DeletionTimestamp != nil {
		t.Error("a volume whose claim exists was rolled back")
	}
	// Its CreateVolume, retried, completes.
	req := createReq(alive, 8<<20)
	req.Parameters["csi.storage.k8s.io/pvc/name"], req.Parameters["csi.storage.k8s.io/pvc/namespace"] = "kept", ns
	if _, err := s.CreateVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: alive}); err != nil {
		t.Fatal(err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func resourceQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
