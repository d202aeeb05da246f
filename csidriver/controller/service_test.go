package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/envtestsuite"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// The tests of this package run the Controller service against a real
// kube-apiserver (PillarVolumeState writes, compare-and-swap conflicts and
// CEL rules are the API server's own) as the controller's RBAC user, and
// an in-process agent whose fencing marks are the fencing module's real,
// durable store.

var (
	cluster *envtestsuite.Cluster
	user    client.Client
	agent   *fakeagent.Agent

	started  sync.Once
	startErr error
	stops    []func() // what start set up, undone in reverse after the last test
)

const (
	storeName = "tank"
	protoName = "tcp"
	nodeA     = "worker-a/nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001"
	nodeB     = "worker-b/nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002"
	hostA     = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001"
	hostB     = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002"
	roundTo   = 4 << 20
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, stop := range slices.Backward(stops) {
		stop()
	}
	os.Exit(code)
}

// needServer starts the API server and the agent for the first test that
// asks. The table tests of the service's pure rules never ask, so they run
// where no kube-apiserver is; a test that asks fails, never skips, when
// they cannot start.
func needServer(t *testing.T) {
	t.Helper()
	started.Do(func() { startErr = start() })
	if startErr != nil {
		t.Fatal(startErr)
	}
}

func start() error {
	var err error
	cluster, err = envtestsuite.Start(filepath.Join("..", "..", "api", "config", "crd"), filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	stops = append(stops, cluster.Stop)
	if user, err = client.New(cluster.User, client.Options{Scheme: cluster.Scheme}); err != nil {
		return err
	}
	agent, err = fakeagent.Start(fakeagent.Options{NodeName: "storage-1", Version: "v1"})
	if err != nil {
		return err
	}
	stops = append(stops, agent.Stop)
	dir, err := os.MkdirTemp("", "pillar-controller-marks")
	if err != nil {
		return err
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	if err := agent.EnableVolumes(dir, roundTo); err != nil {
		return err
	}
	stops = append(stops, agent.CloseVolumes)
	agent.SetStore("tank", fakeagent.Capacity{Total: 100 << 30, Available: 40 << 30})
	ctx := context.Background()
	for _, o := range []client.Object{
		&v1alpha1.PillarAgent{ObjectMeta: metav1.ObjectMeta{Name: "storage-1"}, Spec: v1alpha1.PillarAgentSpec{Address: "127.0.0.1", Port: agent.Port()}},
		&v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: storeName}, Spec: v1alpha1.PillarStoreSpec{AgentName: "storage-1", Type: v1alpha1.BackendZFS,
			ZFS: &v1alpha1.ZFSStore{Pool: "tank"}}},
		&v1alpha1.PillarProtocol{ObjectMeta: metav1.ObjectMeta{Name: protoName}, Spec: v1alpha1.PillarProtocolSpec{Type: v1alpha1.ProtocolNVMeOFTCP,
			NVMeOFTCP: &v1alpha1.NVMeOFTCPProtocol{BindAddress: "192.0.2.10", Port: 4420}}},
	} {
		if err := cluster.Admin.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// newService is one controller: its own locks and agent connections.
func newService(t *testing.T) *controller.Service {
	t.Helper()
	pool := agentclient.NewPool(agentclient.Options{CallTimeout: 5 * time.Second})
	t.Cleanup(pool.Close)
	return controller.New(controller.Config{Client: user, Reader: user, Connector: &reconcile.Connector{Client: user, Pool: pool}})
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}}
}

var rwo = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)

func createReq(name string, size int64) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{rwo},
		Parameters: map[string]string{v1alpha1.StorageClassParamStore: storeName, v1alpha1.StorageClassParamProtocol: protoName,
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "team-a"}}
}

func record(t *testing.T, id string) *v1alpha1.PillarVolumeState {
	t.Helper()
	var v v1alpha1.PillarVolumeState
	if err := cluster.Admin.Get(context.Background(), types.NamespacedName{Name: id}, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

func wantCode(t *testing.T, what string, err error, code codes.Code, says ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not mention %q", what, err, s)
		}
	}
}

func TestCreateVolume(t *testing.T) {
	needServer(t)
	id := uniq("pvc-create-1")
	ctx := context.Background()
	s := newService(t)
	resp, err := s.CreateVolume(ctx, createReq(id, 10<<20+1))
	if err != nil {
		t.Fatal(err)
	}
	vol := resp.GetVolume()
	if vol.GetVolumeId() != id || vol.GetCapacityBytes() != 12<<20 {
		t.Errorf("volume = %v, want ID pvc-create-1 with 12 MiB (rounded up to 4 MiB)", vol)
	}
	vc, err := export.ParseVolumeContext(vol.GetVolumeId(), vol.GetVolumeContext())
	if err != nil {
		t.Fatalf("the volume context pillar-node parses: %v", err)
	}
	if vc.Address.String() != "192.0.2.10" || vc.Port != 4420 {
		t.Errorf("volume context %+v", vc)
	}
	v := record(t, id)
	if !slices.Contains(v.Finalizers, controller.Finalizer) || !v.Status.BackendCreated || !v.Status.Exported ||
		v.Spec.Export == nil || v.Spec.Export.BindAddress != "192.0.2.10" || !*v.Spec.Export.ACLEnabled ||
		v.Annotations[controller.AnnotationPVCName] != "data" || v.Annotations[controller.AnnotationPVCNamespace] != "team-a" {
		t.Errorf("record = %+v", v)
	}
	// One CSI call, one generation: the record is created at the first,
	// which the backend create and the export present with no update
	// before them.
	if v.Spec.PublicationGeneration != 1 {
		t.Errorf("publicationGeneration = %d, want 1 (the create's)", v.Spec.PublicationGeneration)
	}
	if c, e := agent.Presented("CreateVolume", id), agent.Presented("ExportVolume", id); !slices.Equal(c, []uint64{1}) || !slices.Equal(e, []uint64{1}) {
		t.Errorf("the agent saw generations %v (CreateVolume), %v (ExportVolume); want [1], [1]", c, e)
	}
	if v.Generation != 1 {
		t.Errorf("metadata.generation = %d, want 1: only the create wrote the spec", v.Generation)
	}
	if e, ok := agent.Exports()[id]; !ok || !e.ACL || len(e.Hosts) != 0 {
		t.Errorf("export = %+v, %v: want ACL on, no host yet", e, ok)
	}

	// The same request again: the same volume, no agent call.
	calls := agent.Calls("CreateVolume")
	again, err := s.CreateVolume(ctx, createReq(id, 10<<20+1))
	if err != nil || again.GetVolume().GetCapacityBytes() != 12<<20 {
		t.Fatalf("repeated CreateVolume = %v, %v", again, err)
	}
	if agent.Calls("CreateVolume") != calls {
		t.Error("a repeated CreateVolume of a provisioned volume called the agent")
	}
	// An incompatible one: AlreadyExists.
	_, err = s.CreateVolume(ctx, createReq(id, 1<<30))
	wantCode(t, "CreateVolume of a bigger volume under the same name", err, codes.AlreadyExists, id)

	// Bad requests.
	bad := createReq("pvc-bad", 1<<20)
	bad.VolumeCapabilities = []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}
	_, err = s.CreateVolume(ctx, bad)
	wantCode(t, "multi-node writer of a filesystem", err, codes.InvalidArgument, "a filesystem volume cannot have writers on several nodes")
	bad = createReq("pvc-bad", 1<<20)
	bad.VolumeCapabilities[0] = &csi.VolumeCapability{AccessMode: rwo.AccessMode, AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "btrfs"}}}
	_, err = s.CreateVolume(ctx, bad)
	wantCode(t, "btrfs", err, codes.InvalidArgument, "btrfs")
	bad = createReq("pvc-bad", 1<<20)
	delete(bad.Parameters, v1alpha1.StorageClassParamStore)
	_, err = s.CreateVolume(ctx, bad)
	wantCode(t, "no store parameter", err, codes.InvalidArgument, v1alpha1.StorageClassParamStore)
	bad = createReq(uniq("pvc-round"), 10<<20+1)
	bad.CapacityRange.LimitBytes = 11 << 20
	_, err = s.CreateVolume(ctx, bad)
	wantCode(t, "rounding past the limit", err, codes.OutOfRange, "12582912", "rolled back")
	if _, ok := agent.Volumes()[bad.Name]; ok {
		t.Error("the volume rounded past the limit was left on the agent")
	}
	var gone v1alpha1.PillarVolumeState
	if err := cluster.Admin.Get(ctx, types.NamespacedName{Name: bad.Name}, &gone); err == nil {
		t.Error("the record of the volume rounded past the limit was left")
	}
}

// TestCreateResumes interrupts CreateVolume after each step the agent
// confirmed; the retry, by a fresh controller, finishes from the record.
func TestCreateResumes(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	for _, step := range []string{"CreateVolume", "ExportVolume"} {
		t.Run(step, func(t *testing.T) {
			name := uniq("pvc-resume-" + strings.ToLower(step))
			agent.FailNext(step, status.Error(codes.Unavailable, "injected: the agent's backend call failed"))
			_, err := newService(t).CreateVolume(ctx, createReq(name, 8<<20))
			wantCode(t, "interrupted CreateVolume", err, codes.Unavailable, "injected")
			v := record(t, name)
			if v.Status.Exported || v.Status.BackendCreated != (step == "ExportVolume") {
				// A create before a failed export is recorded alone.
				t.Fatalf("status after the failed %s = %+v", step, v.Status)
			}
			if _, err := newService(t).CreateVolume(ctx, createReq(name, 8<<20)); err != nil {
				t.Fatalf("retry: %v", err)
			}
			v = record(t, name)
			if !v.Status.BackendCreated || !v.Status.Exported {
				t.Errorf("status after the retry = %+v", v.Status)
			}
			if _, ok := agent.Volumes()[name]; !ok {
				t.Error("no backend volume after the retry")
			}
			// The record's first generation went to the interrupted
			// call; the retry issues one of its own for the rest.
			want := map[string][]uint64{"CreateVolume": {1, 2}, "ExportVolume": {2}}
			if step == "ExportVolume" {
				// The create was recorded with the failed export: the
				// retry does not repeat it.
				want = map[string][]uint64{"CreateVolume": {1}, "ExportVolume": {1, 2}}
			}
			for m, w := range want {
				if got := agent.Presented(m, name); !slices.Equal(got, w) {
					t.Errorf("%s presented generations %v, want %v", m, got, w)
				}
			}
		})
	}
}

// A node whose host NQN another node's CSINode presents too is refused:
// the storage node could not keep the volume from the other node. The
// node's own CSINode, another driver's entry and another NQN do not count.
func TestPublishRefusesASharedHostNQN(t *testing.T) {
	needServer(t)
	id := uniq("pvc-shared-nqn")
	ctx := context.Background()
	s := newService(t)
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	csiNode := func(name string, drivers ...storagev1.CSINodeDriver) *storagev1.CSINode {
		n := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{Drivers: drivers}}
		if err := cluster.Admin.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cluster.Admin.Delete(context.Background(), n) })
		return n
	}
	csiNode("worker-a", storagev1.CSINodeDriver{Name: driver.Name, NodeID: nodeA})
	csiNode("worker-b", storagev1.CSINodeDriver{Name: driver.Name, NodeID: nodeB}, storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "worker-b/" + hostA})
	pub := func() error {
		_, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo})
		return err
	}
	if err := pub(); err != nil {
		t.Fatalf("no other node presents node A's NQN: %v", err)
	}
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA}); err != nil {
		t.Fatal(err)
	}
	clone := csiNode("worker-c", storagev1.CSINodeDriver{Name: driver.Name, NodeID: "worker-c/" + hostA})
	err := pub()
	wantCode(t, "a host NQN worker-c presents too", err, codes.FailedPrecondition, "worker-a", "worker-c", "Nodes sharing a host NQN")
	if err != nil && strings.Contains(err.Error(), hostA) {
		t.Errorf("the refusal names the host NQN, which reaches the pod's events: %v", err)
	}
	if h := agent.Exports()[id].Hosts; len(h) != 0 {
		t.Errorf("the refused publication allowed hosts %v", h)
	}
	if p := record(t, id).Spec.Publications; len(p) != 0 {
		t.Errorf("the refused publication was recorded: %v", p)
	}
	if err := cluster.Admin.Delete(ctx, clone); err != nil {
		t.Fatal(err)
	}
	if err := pub(); err != nil {
		t.Errorf("with worker-c gone: %v", err)
	}
	if h := agent.Exports()[id].Hosts; !slices.Equal(h, []string{hostA}) {
		t.Errorf("allowed hosts = %v, want node A's", h)
	}
}

func TestPublishExclusivity(t *testing.T) {
	needServer(t)
	id := uniq("pvc-pub")
	ctx := context.Background()
	s := newService(t)
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	pub := func(node string, c *csi.VolumeCapability, ro bool) error {
		_, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: c, Readonly: ro})
		return err
	}
	unpub := func(node string) error {
		_, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node})
		return err
	}
	if err := pub(nodeA, rwo, false); err != nil {
		t.Fatal(err)
	}
	if h := agent.Exports()[id].Hosts; !slices.Equal(h, []string{hostA}) {
		t.Errorf("allowed hosts = %v, want node A's", h)
	}
	if err := pub(nodeA, rwo, false); err != nil {
		t.Errorf("republishing to the same node: %v", err)
	}
	wantCode(t, "RWO to a second node", pub(nodeB, rwo, false), codes.FailedPrecondition, "worker-a")
	if h := agent.Exports()[id].Hosts; !slices.Equal(h, []string{hostA}) {
		t.Errorf("the refused publication changed the hosts: %v", h)
	}
	wantCode(t, "the same node with another mode", pub(nodeA, mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER), false), codes.AlreadyExists)
	wantCode(t, "delete while published", func() error {
		_, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
		return err
	}(), codes.FailedPrecondition, "worker-a")

	if err := unpub(nodeA); err != nil {
		t.Fatal(err)
	}
	if h := agent.Exports()[id].Hosts; len(h) != 0 || len(record(t, id).Spec.Publications) != 0 {
		t.Errorf("after unpublish: hosts %v, publications %v", h, record(t, id).Spec.Publications)
	}
	if err := unpub(nodeA); err != nil {
		t.Errorf("unpublishing again: %v", err)
	}
	// Readers: any number of nodes.
	rox := mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
	if err := pub(nodeA, rox, true); err != nil {
		t.Fatal(err)
	}
	if err := pub(nodeB, rox, true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "RWO next to readers", pub("worker-c/nqn.2014-08.org.nvmexpress:uuid:cccccccc-0000-4000-8000-000000000003", rwo, false),
		codes.FailedPrecondition, "ReadOnlyMany")
	if h := agent.Exports()[id].Hosts; len(h) != 2 {
		t.Errorf("hosts = %v, want both readers", h)
	}
	for _, n := range []string{nodeA, nodeB} {
		if err := unpub(n); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, "publish of an unknown volume", func() error {
		_, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: "pvc-none", NodeId: nodeA, VolumeCapability: rwo})
		return err
	}(), codes.NotFound)
}

func TestDeleteVolume(t *testing.T) {
	needServer(t)
	id := uniq("pvc-del")
	ctx := context.Background()
	s := newService(t)
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	// The agent's one call (export and volume) fails: the record stays,
	// being deleted, and the retry finishes.
	agent.FailNext("DeleteVolume", status.Error(codes.Unavailable, "injected"))
	_, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "interrupted DeleteVolume", err, codes.Unavailable)
	v := record(t, id)
	if v.DeletionTimestamp.IsZero() || !slices.Contains(v.Finalizers, controller.Finalizer) {
		t.Errorf("record after the interrupted delete: %+v", v.ObjectMeta)
	}
	if _, err := newService(t).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	if _, ok := agent.Volumes()[id]; ok {
		t.Error("the backend volume is still there")
	}
	if _, ok := agent.Exports()[id]; ok {
		t.Error("the export is still there")
	}
	var gone v1alpha1.PillarVolumeState
	if err := cluster.Admin.Get(ctx, types.NamespacedName{Name: id}, &gone); client.IgnoreNotFound(err) != nil || err == nil {
		t.Errorf("the record is still there: %v", err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Errorf("deleting again: %v", err)
	}
	// A CreateVolume that meets an interrupted delete finishes it and asks
	// for a retry.
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	agent.FailNext("DeleteVolume", status.Error(codes.Unavailable, "injected"))
	_, err = s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "interrupted DeleteVolume", err, codes.Unavailable)
	_, err = s.CreateVolume(ctx, createReq(id, 8<<20))
	wantCode(t, "CreateVolume of a volume being deleted", err, codes.Aborted, "retry")
	if _, ok := agent.Volumes()[id]; ok {
		t.Error("the backend volume of the interrupted delete is still there")
	}
	// A new volume under the same name is a new lifecycle.
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Errorf("re-creating after delete: %v", err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}

// TestStaleToken replays an agent call with a token the controller has
// since moved past: the agent refuses it and nothing changes.
func TestStaleToken(t *testing.T) {
	needServer(t)
	id := uniq("pvc-stale")
	ctx := context.Background()
	s := newService(t)
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	old := record(t, id)
	if _, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	// A deposed controller still holding the record as it read it.
	pool := agentclient.NewPool(agentclient.Options{})
	defer pool.Close()
	conn, err := pool.Get("storage-1", agentclient.Target{Address: agent.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	ident, _ := export.For(id)
	_, err = conn.Agent.AllowHost(ctx, &agentv1.AllowHostRequest{VolumeId: id, SubsystemNqn: ident.SubsystemNQN, HostNqn: hostB,
		FencingToken: &agentv1.FencingToken{LifecycleUid: string(old.UID), PublicationGeneration: uint64(old.Spec.PublicationGeneration)}})
	rej, ok := agentv1.FencingRejectionOf(err)
	if !ok || rej.GetReason() != agentv1.FencingRejection_REASON_STALE_GENERATION {
		t.Fatalf("stale AllowHost: %v, want a STALE_GENERATION rejection", err)
	}
	if h := agent.Exports()[id].Hosts; !slices.Equal(h, []string{hostA}) {
		t.Errorf("hosts after the stale call = %v", h)
	}
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentControllers: eight controllers create the same volume at
// once and then publish it to eight different nodes. One record, one
// backend volume, one publication; every generation issued once.
func TestConcurrentControllers(t *testing.T) {
	needServer(t)
	id := uniq("pvc-race")
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s := newService(t)
			for {
				_, err := s.CreateVolume(ctx, createReq(id, 8<<20))
				if c := status.Code(err); c == codes.Aborted || c == codes.FailedPrecondition && strings.Contains(err.Error(), "fencing") {
					continue
				}
				errs[i] = err
				return
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("controller %d: %v", i, err)
		}
	}
	if k := len(slices.DeleteFunc(keys(agent.Volumes()), func(k string) bool { return k != id })); k != 1 {
		t.Errorf("%d backend volumes, want 1", k)
	}
	won := make([]bool, n)
	for i := range n {
		wg.Go(func() {
			s := newService(t)
			node := fmt.Sprintf("worker-%d/nqn.2014-08.org.nvmexpress:uuid:0000000%d-0000-4000-8000-000000000000", i, i)
			for {
				_, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: rwo})
				switch status.Code(err) {
				case codes.OK:
					won[i] = true
					return
				case codes.Aborted:
					continue
				case codes.FailedPrecondition:
					if strings.Contains(err.Error(), "fencing") {
						continue
					}
					return
				default:
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	winners := 0
	for i := range n {
		if won[i] {
			winners++
		}
		if errs[i] != nil {
			t.Errorf("publisher %d: %v", i, errs[i])
		}
	}
	v := record(t, id)
	if winners != 1 || len(v.Spec.Publications) != 1 || len(agent.Exports()[id].Hosts) != 1 {
		t.Errorf("%d publications won, record has %v, agent allows %v: want exactly one", winners, v.Spec.Publications, agent.Exports()[id].Hosts)
	}
}

func TestExpandAndCapacity(t *testing.T) {
	needServer(t)
	id := uniq("pvc-grow")
	ctx := context.Background()
	s := newService(t)
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	resp, err := s.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20}, VolumeCapability: rwo})
	if err != nil || resp.GetCapacityBytes() != 64<<20 || !resp.GetNodeExpansionRequired() {
		t.Fatalf("expand = %v, %v", resp, err)
	}
	if v := record(t, id); v.Spec.CapacityBytes != 64<<20 || v.Status.CapacityBytes != 64<<20 {
		t.Errorf("record after expand: spec %d, status %d", v.Spec.CapacityBytes, v.Status.CapacityBytes)
	}
	if agent.Volumes()[id].Size != 64<<20 {
		t.Errorf("backend size %d", agent.Volumes()[id].Size)
	}
	c, err := s.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{v1alpha1.StorageClassParamStore: storeName}})
	if err != nil || c.GetAvailableCapacity() != 40<<30 {
		t.Errorf("GetCapacity = %v, %v", c, err)
	}
	_, err = s.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-none", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}})
	wantCode(t, "expand of an unknown volume", err, codes.NotFound)
}

var seq atomic.Int64

// uniq makes a volume name unique in this test binary (tests run with
// -count above 1 share the API server and the agent).
func uniq(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, seq.Add(1))
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestListAndGetVolume(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	id := uniq("pvc-list")
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
	if err != nil || got.GetVolume().GetCapacityBytes() != 8<<20 || !slices.Equal(got.GetStatus().GetPublishedNodeIds(), []string{nodeA}) {
		t.Errorf("ControllerGetVolume = %v, %v", got, err)
	}
	_, err = s.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: "pvc-none"})
	wantCode(t, "get of an unknown volume", err, codes.NotFound)
	// Page by one: every volume once, this one among them.
	seen, token := map[string]int{}, ""
	for pages := 0; ; pages++ {
		page, err := s.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: 1, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.GetEntries()) > 1 {
			t.Fatalf("page of %d entries, asked for 1", len(page.GetEntries()))
		}
		for _, e := range page.GetEntries() {
			seen[e.GetVolume().GetVolumeId()]++
		}
		if token = page.GetNextToken(); token == "" {
			break
		}
	}
	if seen[id] != 1 {
		t.Errorf("volume listed %d times", seen[id])
	}
	for v, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", v, n)
		}
	}
	_, err = s.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: "not-a-token"})
	wantCode(t, "a foreign starting token", err, codes.Aborted)
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}

// TestDeleteVolumeRefusedWhileAnotherPVNamesIt: a read-only
// PersistentVolume made by hand for a volume (docs/install.md, "Sharing a
// volume read-only") keeps the volume from being deleted; the volume's
// own PersistentVolume (named as the volume) does not; once the other is
// gone the delete goes ahead.
func TestDeleteVolumeRefusedWhileAnotherPVNamesIt(t *testing.T) {
	needServer(t)
	id := uniq("pvc-shared")
	ctx := context.Background()
	s := newService(t)
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	pv := func(name string, mode corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("8Mi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver.Name, VolumeHandle: id, FSType: "ext4"}},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		}}
	}
	own, reader := pv(id, corev1.ReadWriteOnce), pv(id+"-ro", corev1.ReadOnlyMany)
	for _, o := range []*corev1.PersistentVolume{own, reader} {
		if err := cluster.Admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cluster.Admin.Delete(context.Background(), o) })
	}
	_, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume while another PV names the volume", err, codes.FailedPrecondition, "PersistentVolume "+reader.Name, "delete that PersistentVolume first")
	if _, ok := agent.Volumes()[id]; !ok {
		t.Fatal("the backend volume is gone")
	}
	if v := record(t, id); !v.DeletionTimestamp.IsZero() {
		t.Error("the refused delete marked the record deleted")
	}
	if err := cluster.Admin.Delete(ctx, reader); err != nil {
		t.Fatal(err)
	}
	// The PV may linger behind its protection finalizer; drop it as the
	// PV controller does once nothing uses it.
	eventuallyGone(t, reader)
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("DeleteVolume once only its own PV names it: %v", err)
	}
	if _, ok := agent.Volumes()[id]; ok {
		t.Error("the backend volume is still there")
	}
}

// eventuallyGone removes o's finalizers and waits until o is gone.
func eventuallyGone(t *testing.T, o client.Object) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cluster.Admin.Get(ctx, client.ObjectKeyFromObject(o), o)
		if apierrors.IsNotFound(err) {
			return
		}
		if err == nil && len(o.GetFinalizers()) > 0 {
			o.SetFinalizers(nil)
			_ = cluster.Admin.Update(ctx, o)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there: %v", o.GetName(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The record keeps the last failed call until the same operation
// succeeds: `kubectl get pvstate` says what a stuck claim waits for.
func TestLastFailure(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	id := uniq("pvc-lastfailure")

	long := "injected: the pool is busy " + strings.Repeat("x", 4000)
	agent.FailNext("ExportVolume", status.Error(codes.Unavailable, long))
	_, err := s.CreateVolume(ctx, createReq(id, 8<<20))
	wantCode(t, "CreateVolume with a failing export", err, codes.Unavailable, "injected")
	lf := record(t, id).Status.LastFailure
	if lf == nil || lf.Operation != "CreateVolume" || lf.Code != "Unavailable" || !strings.Contains(lf.Message, "injected: the pool is busy") || lf.Time.IsZero() {
		t.Fatalf("lastFailure after a failed CreateVolume = %+v", lf)
	}
	if len(lf.Message) > 1024 || !strings.HasSuffix(lf.Message, "...") {
		t.Errorf("a %d-byte error kept as %d bytes (want at most 1024, cut with ...)", len(long), len(lf.Message))
	}

	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	if lf := record(t, id).Status.LastFailure; lf != nil {
		t.Errorf("lastFailure after CreateVolume succeeded = %+v, want none", lf)
	}

	grow := &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}, VolumeCapability: rwo}
	agent.FailNext("ExpandVolume", status.Error(codes.ResourceExhausted, "injected: no space"))
	_, err = s.ControllerExpandVolume(ctx, grow)
	wantCode(t, "expansion with a full pool", err, codes.ResourceExhausted)
	// Another operation's success leaves the failure in place.
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	if lf := record(t, id).Status.LastFailure; lf == nil || lf.Operation != "ControllerExpandVolume" || lf.Code != "ResourceExhausted" {
		t.Fatalf("lastFailure after a failed expansion and another CreateVolume = %+v", lf)
	}
	if _, err := s.ControllerExpandVolume(ctx, grow); err != nil {
		t.Fatal(err)
	}
	if lf := record(t, id).Status.LastFailure; lf != nil {
		t.Errorf("lastFailure after the expansion succeeded = %+v, want none", lf)
	}

	// A call for a volume without a record leaves nothing behind, and a
	// refused one (ABORTED: another call runs) records nothing.
	_, err = s.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-none", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}})
	wantCode(t, "expand of an unknown volume", err, codes.NotFound)
	unlock := controller.LockVolume(t, s, id)
	_, err = s.ControllerExpandVolume(ctx, grow)
	unlock()
	wantCode(t, "expansion while another call runs", err, codes.Aborted)
	if lf := record(t, id).Status.LastFailure; lf != nil {
		t.Errorf("lastFailure after an ABORTED call = %+v, want none", lf)
	}
}

// TestStoreReplaced deletes a volume's PillarStore and creates another
// under its name: the controller refuses to act on the volume through it,
// the record and the backend volume stay, until the new store adopts the
// old one's UID. The record's storeUID cannot change.
func TestStoreReplaced(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	const name = "replaced"
	newStore := func() *v1alpha1.PillarStore {
		st := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.PillarStoreSpec{AgentName: "storage-1", Type: v1alpha1.BackendZFS,
			ZFS: &v1alpha1.ZFSStore{Pool: "tank"}}}
		if err := cluster.Admin.Create(ctx, st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	old := newStore()
	id := uniq("pvc-replaced")
	req := createReq(id, 8<<20)
	req.Parameters[v1alpha1.StorageClassParamStore] = name
	if _, err := s.CreateVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	if v := record(t, id); v.Spec.StoreUID != old.UID {
		t.Fatalf("the record names store UID %q, want %q", v.Spec.StoreUID, old.UID)
	}
	if err := cluster.Admin.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	var cur *v1alpha1.PillarStore
	eventually(t, func() error { // the old one may still be going
		st := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: old.Spec}
		if err := cluster.Admin.Create(ctx, st); err != nil {
			return err
		}
		cur = st
		return nil
	})

	// A recovery does not push its export through the replaced store, and
	// says so.
	pushed, err := s.PushExports(ctx, "storage-1")
	if err != nil {
		t.Fatal(err)
	}
	if why := pushed.Failed[id]; !strings.Contains(why, "is not the store the volume was created in") {
		t.Errorf("PushExports: Failed[%s] = %q, want the replaced store named", id, why)
	}
	_, err = s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume through the replaced store", err, codes.FailedPrecondition,
		"is not the store the volume was created in", "kubectl annotate pillarstore replaced pillar-csi.io/adopt-store-uid="+string(old.UID))
	if _, ok := agent.Volumes()[id]; !ok {
		t.Error("the backend volume is gone, though the store was refused")
	}
	// The CRD's rule freezes storeUID where the API server enforces CEL
	// (1.25 and newer); 1.24 stores the change, and the rule cannot hold
	// there.
	if cluster.Minor >= 25 {
		v := record(t, id)
		v.Spec.StoreUID = cur.UID
		if err := cluster.Admin.Update(ctx, v); !apierrors.IsInvalid(err) {
			t.Errorf("changing the record's storeUID on 1.%d: %v, want Invalid", cluster.Minor, err)
		}
	}

	cur.Annotations = map[string]string{v1alpha1.AnnotationAdoptStoreUID: string(old.UID)}
	if err := cluster.Admin.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("DeleteVolume through the adopting store: %v", err)
	}
	if _, ok := agent.Volumes()[id]; ok {
		t.Error("the backend volume is still there")
	}
}
