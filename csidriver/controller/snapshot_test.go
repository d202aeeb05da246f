package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
)

func snapshotRecord(t *testing.T, id string) *v1alpha1.PillarSnapshotState {
	t.Helper()
	var sn v1alpha1.PillarSnapshotState
	if err := cluster.Admin.Get(context.Background(), types.NamespacedName{Name: id}, &sn); err != nil {
		t.Fatal(err)
	}
	return &sn
}

func snapshotGone(t *testing.T, id string) bool {
	t.Helper()
	var sn v1alpha1.PillarSnapshotState
	err := cluster.Admin.Get(context.Background(), types.NamespacedName{Name: id}, &sn)
	return apierrors.IsNotFound(err)
}

func fromSnapshot(req *csi.CreateVolumeRequest, id string) *csi.CreateVolumeRequest {
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	return req
}

func fromVolume(req *csi.CreateVolumeRequest, id string) *csi.CreateVolumeRequest {
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	return req
}

// TestSnapshotRestoreClone takes a snapshot, restores it and clones the
// source, then deletes the source first: the record of each step, the
// agent's model, idempotency by name and the refusals of bad requests.
func TestSnapshotRestoreClone(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	src := uniq("pvc-snapsrc")
	if _, err := s.CreateVolume(ctx, createReq(src, 8<<20)); err != nil {
		t.Fatal(err)
	}
	snapName := uniq("snapshot-a")
	req := &csi.CreateSnapshotRequest{Name: snapName, SourceVolumeId: src, Parameters: map[string]string{
		"csi.storage.k8s.io/volumesnapshot/name": "nightly", "csi.storage.k8s.io/volumesnapshot/namespace": "team-a"}}
	resp, err := s.CreateSnapshot(ctx, req)
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	snap := resp.GetSnapshot()
	if snap.GetSnapshotId() != snapName || snap.GetSourceVolumeId() != src || snap.GetSizeBytes() != 8<<20 || !snap.GetReadyToUse() || snap.GetCreationTime().GetSeconds() != 1700000000 {
		t.Errorf("snapshot = %v", snap)
	}
	sn := snapshotRecord(t, snapName)
	if !slices.Contains(sn.Finalizers, controller.SnapshotFinalizer) || sn.Spec.SourceVolumeID != src || sn.Spec.StoreName != storeName ||
		!sn.Status.ReadyToUse || sn.Annotations[v1alpha1.AnnotationVolumeSnapshotName] != "nightly" {
		t.Errorf("snapshot record = %+v", sn)
	}
	if got := agent.Snapshots()[snapName]; got.Source != src || got.Size != 8<<20 {
		t.Errorf("the agent's snapshot = %+v", got)
	}
	// Idempotent by name: the same answer and no agent call; another
	// source is another snapshot.
	calls := agent.Calls("CreateSnapshot")
	if again, err := s.CreateSnapshot(ctx, req); err != nil || again.GetSnapshot().GetSnapshotId() != snapName {
		t.Errorf("repeated CreateSnapshot = %v, %v", again, err)
	}
	if agent.Calls("CreateSnapshot") != calls {
		t.Error("a repeated CreateSnapshot of a ready snapshot called the agent")
	}
	other := uniq("pvc-other")
	if _, err := s.CreateVolume(ctx, createReq(other, 4<<20)); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: snapName, SourceVolumeId: other})
	wantCode(t, "the snapshot's name for another source", err, codes.AlreadyExists, src)
	_, err = s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: uniq("snapshot-none"), SourceVolumeId: "pvc-no-such-volume"})
	wantCode(t, "snapshot of a missing volume", err, codes.NotFound, "pvc-no-such-volume")
	_, err = s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{SourceVolumeId: src})
	wantCode(t, "no name", err, codes.InvalidArgument)

	// Restore: at least the snapshot's size, in its store.
	restored := uniq("pvc-restored")
	_, err = s.CreateVolume(ctx, fromSnapshot(createReq(restored, 4<<20), snapName))
	wantCode(t, "restore smaller than the snapshot", err, codes.OutOfRange, "8388608")
	otherStore := fromSnapshot(createReq(restored, 8<<20), snapName)
	otherStore.Parameters[v1alpha1.StorageClassParamStore] = "elsewhere"
	_, err = s.CreateVolume(ctx, otherStore)
	wantCode(t, "restore into another store", err, codes.InvalidArgument, storeName, "elsewhere")
	rresp, err := s.CreateVolume(ctx, fromSnapshot(createReq(restored, 16<<20), snapName))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := rresp.GetVolume().GetContentSource().GetSnapshot().GetSnapshotId(); got != snapName {
		t.Errorf("restored volume's content source %v", rresp.GetVolume().GetContentSource())
	}
	if v := agent.Volumes()[restored]; v.Origin != "snapshot "+snapName || v.Size != 16<<20 {
		t.Errorf("the agent's restored volume = %+v", v)
	}
	if ds := record(t, restored).Spec.DataSource; ds == nil || ds.SnapshotID != snapName {
		t.Errorf("restored record's dataSource = %+v", ds)
	}
	// Restore with no size: the snapshot's.
	bare := fromSnapshot(createReq(uniq("pvc-bare"), 0), snapName)
	bare.CapacityRange = nil
	if r, err := s.CreateVolume(ctx, bare); err != nil || r.GetVolume().GetCapacityBytes() != 8<<20 {
		t.Errorf("restore without a size = %v, %v; want the snapshot's 8 MiB", r, err)
	}
	// The same name with another source, or none: AlreadyExists.
	_, err = s.CreateVolume(ctx, fromVolume(createReq(restored, 16<<20), src))
	wantCode(t, "restored volume's name from another source", err, codes.AlreadyExists, "snapshot "+snapName)
	_, err = s.CreateVolume(ctx, createReq(restored, 16<<20))
	wantCode(t, "restored volume's name made empty", err, codes.AlreadyExists, "an empty volume")

	// Clone the source.
	clone := uniq("pvc-clone")
	if _, err := s.CreateVolume(ctx, fromVolume(createReq(clone, 8<<20), src)); err != nil {
		t.Fatalf("clone: %v", err)
	}
	if v := agent.Volumes()[clone]; v.Origin != "volume "+src {
		t.Errorf("the agent's clone = %+v", v)
	}

	// Delete the source first: the snapshot stays, and restores.
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: src}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateVolume(ctx, fromSnapshot(createReq(uniq("pvc-late"), 8<<20), snapName)); err != nil {
		t.Errorf("restore after the source's deletion: %v", err)
	}
	_, err = s.CreateVolume(ctx, fromVolume(createReq(uniq("pvc-clone-gone"), 8<<20), src))
	wantCode(t, "clone of a deleted volume", err, codes.NotFound, src)
	list, err := s.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: src})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetSnapshotId() != snapName {
		t.Errorf("ListSnapshots of the deleted source = %v, %v", list, err)
	}
	if _, err := s.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapName}); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if _, err := s.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapName}); err != nil {
		t.Errorf("repeated DeleteSnapshot: %v", err)
	}
	if _, ok := agent.Snapshots()[snapName]; ok || !snapshotGone(t, snapName) {
		t.Error("the snapshot or its record is still there")
	}
	list, err = s.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: snapName})
	if err != nil || len(list.GetEntries()) != 0 {
		t.Errorf("ListSnapshots of the deleted snapshot = %v, %v", list, err)
	}
	_, err = s.CreateVolume(ctx, fromSnapshot(createReq(uniq("pvc-from-gone"), 8<<20), snapName))
	wantCode(t, "restore of a deleted snapshot", err, codes.NotFound, snapName)
	// A retry of a restore made before: its record answers, though its
	// snapshot and the clone's source are gone now.
	if r, err := s.CreateVolume(ctx, fromSnapshot(createReq(restored, 16<<20), snapName)); err != nil || r.GetVolume().GetVolumeId() != restored {
		t.Errorf("retried restore after its snapshot's deletion = %v, %v", r, err)
	}
	if _, err := s.CreateVolume(ctx, fromVolume(createReq(clone, 8<<20), src)); err != nil {
		t.Errorf("retried clone after its source's deletion: %v", err)
	}
}

// TestSnapshotResumes: a CreateSnapshot whose agent call failed leaves its
// record, not ready and saying why; the retry finishes it.
func TestSnapshotResumes(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	src := uniq("pvc-snapresume")
	if _, err := s.CreateVolume(ctx, createReq(src, 4<<20)); err != nil {
		t.Fatal(err)
	}
	name := uniq("snapshot-resume")
	agent.FailNext("CreateSnapshot", status.Error(codes.Unavailable, "injected: the backend's snapshot failed"))
	_, err := s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src})
	wantCode(t, "CreateSnapshot with a failing agent", err, codes.Unavailable, "injected")
	sn := snapshotRecord(t, name)
	if sn.Status.ReadyToUse || sn.Status.LastFailure == nil || sn.Status.LastFailure.Operation != "CreateSnapshot" {
		t.Errorf("record after the failure: %+v", sn.Status)
	}
	// The metric counts it as pending (other tests' snapshots share the
	// API server: at least one).
	reg := prometheus.NewRegistry()
	if _, err := controller.NewMetrics(reg, user); err != nil {
		t.Fatal(err)
	}
	if n := gaugeOf(t, reg, "pillar_controller_snapshots", "pending"); n < 1 {
		t.Errorf("pillar_controller_snapshots{state=pending} = %v with a snapshot pending", n)
	}
	// A restore waits for it.
	_, err = s.CreateVolume(ctx, fromSnapshot(createReq(uniq("pvc-early"), 4<<20), name))
	wantCode(t, "restore of a snapshot not ready", err, codes.Unavailable, "not ready")
	if _, err := newService(t).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src}); err != nil {
		t.Fatalf("retried CreateSnapshot: %v", err)
	}
	if sn := snapshotRecord(t, name); !sn.Status.ReadyToUse || sn.Status.LastFailure != nil {
		t.Errorf("record after the retry: %+v", sn.Status)
	}
	// The snapshot's own lifecycle and the source's token reached the
	// agent together.
	if got := agent.Presented("CreateSnapshot", "snapshot/"+name); !slices.Equal(got, []uint64{1, 1}) {
		t.Errorf("snapshot generations presented %v, want [1 1]", got)
	}
	if got := agent.Presented("CreateSnapshot", src); len(got) != 2 {
		t.Errorf("source tokens presented %v, want two", got)
	}
}

// TestRestoreNeedsACapableAgent: an agent without CAPABILITY_SNAPSHOTS
// would make an empty volume of a restore; the controller refuses before
// it asks.
func TestRestoreNeedsACapableAgent(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	src := uniq("pvc-capsrc")
	if _, err := s.CreateVolume(ctx, createReq(src, 4<<20)); err != nil {
		t.Fatal(err)
	}
	agent.SetCapabilities(agentv1.Capability_CAPABILITY_BACKEND_ZFS, agentv1.Capability_CAPABILITY_TRANSPORT_NVMEOF_TCP)
	t.Cleanup(func() {
		agent.SetCapabilities(agentv1.Capability_CAPABILITY_BACKEND_ZFS, agentv1.Capability_CAPABILITY_BACKEND_LVM,
			agentv1.Capability_CAPABILITY_BACKEND_LVM_THIN, agentv1.Capability_CAPABILITY_TRANSPORT_NVMEOF_TCP, agentv1.Capability_CAPABILITY_SNAPSHOTS)
	})
	clone := uniq("pvc-capclone")
	_, err := s.CreateVolume(ctx, fromVolume(createReq(clone, 4<<20), src))
	wantCode(t, "clone through an agent without snapshots", err, codes.FailedPrecondition, "upgrade")
	if _, ok := agent.Volumes()[clone]; ok {
		t.Error("the agent made the clone")
	}
	snap := uniq("snapshot-oldagent")
	_, err = s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: snap, SourceVolumeId: src})
	wantCode(t, "snapshot through an agent without snapshots", err, codes.FailedPrecondition, "upgrade")
	if !snapshotGone(t, snap) {
		t.Error("a snapshot was recorded for an agent that cannot take it")
	}
}

// TestLinearLVMRefusesSnapshots: a linear LVM store takes no snapshot and
// makes no clone; the refusal names the store's type, and nothing is
// recorded or asked of the agent.
func TestLinearLVMRefusesSnapshots(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	store := uniq("linear")
	st := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: store}, Spec: v1alpha1.PillarStoreSpec{AgentName: "storage-1", Type: v1alpha1.BackendLVM,
		LVM: &v1alpha1.LVMStore{VolumeGroup: "vg-" + store}}}
	if err := cluster.Admin.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	s := newService(t)
	src := uniq("pvc-linear")
	req := createReq(src, 4<<20)
	req.Parameters[v1alpha1.StorageClassParamStore] = store
	if _, err := s.CreateVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	calls := agent.Calls("CreateSnapshot")
	name := uniq("snapshot-linear")
	_, err := s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src})
	wantCode(t, "snapshot on linear LVM", err, codes.FailedPrecondition, "linear LVM", store)
	if !snapshotGone(t, name) || agent.Calls("CreateSnapshot") != calls {
		t.Error("a refused snapshot was recorded or reached the agent")
	}
	clone := fromVolume(createReq(uniq("pvc-linear-clone"), 4<<20), src)
	clone.Parameters[v1alpha1.StorageClassParamStore] = store
	_, err = s.CreateVolume(ctx, clone)
	wantCode(t, "clone on linear LVM", err, codes.InvalidArgument, "linear LVM")
	var v v1alpha1.PillarVolumeState
	if err := cluster.Admin.Get(ctx, types.NamespacedName{Name: clone.Name}, &v); !apierrors.IsNotFound(err) {
		t.Errorf("the refused clone has a record: %v", err)
	}
}

// contentCRD serves a VolumeSnapshotContent kind in the suite's API server:
// what the abandoned-snapshot check reads is only whether an object of
// that name exists, so a schema that keeps every field stands for
// external-snapshotter's.
func contentCRD(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "volumesnapshotcontents.snapshot.storage.k8s.io",
			// As upstream's: a *.k8s.io group needs it.
			Annotations: map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes-csi/external-snapshotter/pull/814"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "snapshot.storage.k8s.io", Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "volumesnapshotcontents", Singular: "volumesnapshotcontent",
				Kind: "VolumeSnapshotContent", ListKind: "VolumeSnapshotContentList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := cluster.Admin.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	eventually(t, func() error {
		var u unstructured.UnstructuredList
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotContentList"})
		return cluster.Admin.List(ctx, &u)
	})
}

// TestAbandonedSnapshot: a CreateSnapshot that never completed, whose
// VolumeSnapshotContent is gone, is rolled back; one whose content
// exists, or a ready one, is left alone.
func TestAbandonedSnapshot(t *testing.T) {
	needServer(t)
	contentCRD(t)
	ctx := context.Background()
	s := newService(t)
	rec := events.NewFakeRecorder(16)
	r := &controller.SnapshotStateReconciler{Service: s, Recorder: rec, AbandonAfter: time.Nanosecond}
	src := uniq("pvc-abandoned-src")
	if _, err := s.CreateVolume(ctx, createReq(src, 4<<20)); err != nil {
		t.Fatal(err)
	}
	half := func(content string) string {
		name := uniq("snapshot-abandoned")
		agent.FailNext("CreateSnapshot", status.Error(codes.Unavailable, "injected"))
		_, err := s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src,
			Parameters: map[string]string{"csi.storage.k8s.io/volumesnapshotcontent/name": content}})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("half a snapshot: %v", err)
		}
		return name
	}
	existing := uniq("snapcontent-kept")
	c := &unstructured.Unstructured{}
	c.SetGroupVersionKind(schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotContent"})
	c.SetName(existing)
	if err := cluster.Admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	gone, kept := half(uniq("snapcontent-gone")), half(existing)
	for _, id := range []string{gone, kept} {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: id}}); err != nil {
			t.Fatalf("reconcile %s: %v", id, err)
		}
	}
	if !snapshotGone(t, gone) {
		t.Error("the abandoned snapshot's record is still there")
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "SnapshotAbandoned") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no SnapshotAbandoned event")
	}
	if snapshotGone(t, kept) {
		t.Error("a snapshot whose VolumeSnapshotContent exists was rolled back")
	}
	// The kept one's CreateSnapshot, retried, completes; a ready snapshot
	// is never judged.
	if _, err := s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: kept, SourceVolumeId: src}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Admin.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: kept}}); err != nil || snapshotGone(t, kept) {
		t.Errorf("a ready snapshot was rolled back (%v)", err)
	}
	if _, ok := agent.Snapshots()[kept]; !ok {
		t.Error("the ready snapshot is gone from the agent")
	}
}

// gaugeOf is the value of metric's series with label state.
func gaugeOf(t *testing.T, reg *prometheus.Registry, metric, state string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "state" && l.GetValue() == state {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{state=%q}", metric, state)
	return 0
}

// TestLongSnapshotName: a name too long for the agent's fencing key (or no
// valid ID) gets a digest for an ID, the same at every retry.
func TestLongSnapshotName(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	src := uniq("pvc-longname")
	if _, err := s.CreateVolume(ctx, createReq(src, 4<<20)); err != nil {
		t.Fatal(err)
	}
	name := uniq(strings.Repeat("s", 120))
	first, err := s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src})
	if err != nil {
		t.Fatalf("CreateSnapshot of a %d-byte name: %v", len(name), err)
	}
	id := first.GetSnapshot().GetSnapshotId()
	if !strings.HasPrefix(id, "snapshot-") || len(id) > agentv1.MaxSnapshotIDLength {
		t.Errorf("snapshot ID %q for a %d-byte name", id, len(name))
	}
	again, err := s.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src})
	if err != nil || again.GetSnapshot().GetSnapshotId() != id {
		t.Errorf("retry = %v, %v; want %s", again, err, id)
	}
	if _, ok := agent.Snapshots()[id]; !ok {
		t.Errorf("the agent has no snapshot %s", id)
	}
	if _, err := s.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
		t.Fatal(err)
	}
}
