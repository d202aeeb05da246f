//go:build kernel

package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

const (
	// csiTimeout bounds one CSI call of the test's: a CreateVolume in the
	// guest runs zfs or lvcreate and a dozen configfs writes, a
	// NodeStageVolume a connect and a mkfs, each under TCG.
	csiTimeout = 3 * time.Minute
	// zfsParent is the parent dataset of every ZFS store of these tests.
	zfsParent = "pillar"
	// lvmTagPrefix is the tag pillar-agent's LVM backend puts on each LV
	// it creates, followed by the volume ID (backends/lvm.TagPrefix).
	lvmTagPrefix = "pillar-csi.io_volume-id_"
)

// Backends of a stack.
const (
	backendZFS = "zfs"
	// backendZFSSparse is a ZFS store with sparse set: zvols without a
	// refreservation, as snapshots and restores are usually served.
	backendZFSSparse = "zfs-sparse"
	backendLVMThin   = "lvm-thin"
)

// stack is one storage node as an operator declares it: a pillar-agent
// process with its PillarAgent, a PillarStore per backend, one
// PillarProtocol (NVMe/TCP on 127.0.0.1 with ACLs) and a
// PillarStorageClass per store, all Ready; and the test's client of the
// controller's CSI socket.
type stack struct {
	t testing.TB
	// root is the test the stack was made in; t may be a subtest of it.
	root    testing.TB
	l       *lab
	name    string
	agent   *agent
	port    int // the nvmet port
	stores  map[string]*store
	ctrl    csi.ControllerClient
	workers []*worker
}

// store is one PillarStore of a stack and what is needed to look at its
// backend directly.
type store struct {
	kind   string // backendZFS, backendZFSSparse or backendLVMThin
	name   string // the PillarStore
	class  string // the generated StorageClass
	params map[string]string
	pool   *fixture.Pool
	vg     *fixture.VG
}

// newStack starts an agent for node name with a store for each kind and
// waits until everything is Ready and the StorageClasses are generated.
func newStack(t testing.TB, l *lab, name string, kinds ...string) *stack {
	t.Helper()
	began := time.Now()
	s := &stack{t: t, root: t, l: l, name: name, stores: map[string]*store{}, port: fixture.FreeTCPPort(t)}
	var objs []client.Object
	for _, k := range kinds {
		st := &store{kind: k, name: name + "-" + k}
		ps := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: st.name}, Spec: v1alpha1.PillarStoreSpec{AgentName: v1alpha1.ObjectName(name)}}
		switch k {
		case backendZFS, backendZFSSparse:
			st.pool = fixture.NewZPool(t, fixture.PoolOptions{Size: 1024 * mib})
			ps.Spec.Type = v1alpha1.BackendZFS
			ps.Spec.ZFS = &v1alpha1.ZFSStore{Pool: st.pool.Name, ParentDataset: zfsParent, Sparse: k == backendZFSSparse}
		case backendLVMThin:
			st.vg = fixture.NewVG(t, fixture.VGOptions{Size: 1024 * mib, ThinPoolSize: 800 * mib})
			ps.Spec.Type = v1alpha1.BackendLVM
			ps.Spec.LVM = &v1alpha1.LVMStore{VolumeGroup: st.vg.Name, ThinPool: st.vg.ThinPool}
		default:
			t.Fatalf("unknown backend %q", k)
		}
		s.stores[k] = st
		objs = append(objs, ps)
	}
	s.agent = startAgent(t, l, name, nil)
	proto := &v1alpha1.PillarProtocol{ObjectMeta: metav1.ObjectMeta{Name: name + "-nvme"}, Spec: v1alpha1.PillarProtocolSpec{
		Type: v1alpha1.ProtocolNVMeOFTCP,
		NVMeOFTCP: &v1alpha1.NVMeOFTCPProtocol{BindAddress: "127.0.0.1", Port: int32(s.port), ACLEnabled: ptr.To(true),
			// A reconnect every second, so that the time to "live" after
			// an export comes back measures the driver, not the
			// kernel's default 10 s delay; two minutes before the
			// initiator gives up bounds a stuck unmount in cleanup.
			Connect: &v1alpha1.NVMeOFConnectOptions{CtrlLossTimeoutSeconds: ptr.To(int32(120)), ReconnectDelaySeconds: ptr.To(int32(1))}}}}
	objs = append(objs, proto)
	var classes []*v1alpha1.PillarStorageClass
	for _, k := range kinds {
		c := &v1alpha1.PillarStorageClass{ObjectMeta: metav1.ObjectMeta{Name: s.stores[k].name}, Spec: v1alpha1.PillarStorageClassSpec{
			StoreName: v1alpha1.ObjectName(s.stores[k].name), ProtocolName: v1alpha1.ObjectName(proto.Name), FSType: v1alpha1.FSTypeExt4}}
		classes = append(classes, c)
		objs = append(objs, c)
	}
	l.create(t, append([]client.Object{agentObj(name, name, s.agent.port, "")}, objs...)...)

	l.waitAgent(t, name, metav1.ConditionTrue, "AgentReady", nil)
	for _, k := range kinds {
		l.waitReady(t, &v1alpha1.PillarStore{}, s.stores[k].name, func(o client.Object) []metav1.Condition { return o.(*v1alpha1.PillarStore).Status.Conditions })
	}
	l.waitReady(t, &v1alpha1.PillarProtocol{}, proto.Name, func(o client.Object) []metav1.Condition { return o.(*v1alpha1.PillarProtocol).Status.Conditions })
	for i, k := range kinds {
		got := l.waitReady(t, &v1alpha1.PillarStorageClass{}, classes[i].Name, func(o client.Object) []metav1.Condition {
			return o.(*v1alpha1.PillarStorageClass).Status.Conditions
		}).(*v1alpha1.PillarStorageClass)
		st := s.stores[k]
		st.class = got.Status.StorageClassName
		var sc storagev1.StorageClass
		if err := l.get(st.class, &sc); err != nil {
			t.Fatalf("the StorageClass %q that PillarStorageClass %s names: %v", st.class, got.Name, err)
		}
		st.params = sc.Parameters
		t.Logf("StorageClass %s (provisioner %s): parameters %v", sc.Name, sc.Provisioner, sc.Parameters)
	}

	conn, err := grpc.NewClient(l.csiEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	waitProbe(t, "pillar-controller", csi.NewIdentityClient(conn), func() bool { return l.controller.exited() })
	s.ctrl = csi.NewControllerClient(conn)
	t.Logf("stack %s (agent, %d store(s), protocol on 127.0.0.1:%d, StorageClasses) Ready in %v (guest time)", name, len(kinds), s.port,
		time.Since(began).Round(10*time.Millisecond))
	return s
}

// waitReady waits until the cluster-scoped object name has Ready=True
// for its current generation, and returns it.
func (l *lab) waitReady(t testing.TB, o client.Object, name string, conds func(client.Object) []metav1.Condition) client.Object {
	t.Helper()
	began := time.Now()
	kind := strings.TrimPrefix(fmt.Sprintf("%T", o), "*v1alpha1.")
	eventually(t, fmt.Sprintf("%s %s Ready", kind, name), statusTimeout, func() (bool, string) {
		if err := l.get(name, o); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(conds(o), v1alpha1.ConditionReady)
		if c == nil {
			return false, "no Ready condition"
		}
		return c.Status == metav1.ConditionTrue && c.ObservedGeneration == o.GetGeneration(), fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
	})
	t.Logf("%s %s Ready after %v (guest time)", kind, name, time.Since(began).Round(10*time.Millisecond))
	return o
}

// waitProbe waits until a CSI plugin's Probe answers ready.
func waitProbe(t testing.TB, name string, ident csi.IdentityClient, exited func() bool) {
	t.Helper()
	began := time.Now()
	eventually(t, name+" to answer Probe ready", startTimeout, func() (bool, string) {
		if exited() {
			t.Fatalf("%s has exited", name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := ident.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			return false, err.Error()
		}
		return r.GetReady() == nil || r.GetReady().GetValue(), fmt.Sprintf("ready %v", r.GetReady())
	})
	t.Logf("%s answers Probe after %v (guest time)", name, time.Since(began).Round(10*time.Millisecond))
}

// backendVolumes lists the volume IDs that have a zvol (under the store's
// parent dataset) or a pillar-tagged LV (in its volume group), as the
// storage tools report them.
func (st *store) backendVolumes(t testing.TB) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	switch st.kind {
	case backendZFS, backendZFSSparse:
		out, err := fixture.Command(ctx, "zfs list", "zfs", "list", "-H", "-o", "name", "-t", "volume", "-r", st.pool.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range strings.Fields(out) {
			if id, ok := strings.CutPrefix(n, st.pool.Name+"/"+zfsParent+"/"); ok {
				ids = append(ids, id)
			} else {
				t.Errorf("a zvol outside the store's parent dataset: %s", n)
			}
		}
	case backendLVMThin:
		out, err := fixture.LVM(ctx, "lvs", "--noheadings", "--separator", "|", "-o", "lv_name,lv_tags", st.vg.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			name, tags, _ := strings.Cut(strings.TrimSpace(line), "|")
			for _, tag := range strings.Split(tags, ",") {
				if id, ok := strings.CutPrefix(tag, lvmTagPrefix); ok {
					ids = append(ids, id)
					if name != id {
						t.Logf("LV %s carries volume ID %s", name, id)
					}
				}
			}
		}
	}
	return ids
}

// backendSize is the size of the volume's zvol or LV, in bytes.
func (st *store) backendSize(t testing.TB, id string) int64 {
	t.Helper()
	ctx := context.Background()
	switch st.kind {
	case backendZFS, backendZFSSparse:
		out, err := fixture.Command(ctx, "zfs get volsize", "zfs", "get", "-Hp", "-o", "value", "volsize", st.pool.Name+"/"+zfsParent+"/"+id)
		if err != nil {
			t.Fatal(err)
		}
		n, err := numbers(out, 1)
		if err != nil {
			t.Fatal(err)
		}
		return n[0]
	default:
		n, err := st.vg.LVSize(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// ---------------------------------------------------------------- pillar-node

// worker is a bin/pillar-node process: one worker node with its own host
// NQN, state directory and socket. Several share the guest's kernel
// initiator, as the kernel's own NVMe-oF tests share one host.
type worker struct {
	name    string
	hostNQN string
	nodeID  string
	dir     string
	proc    *proc
	api     csi.NodeClient
}

// startWorker runs pillar-node for node name with a generated host NQN
// and waits until it answers NodeGetInfo with the node ID the controller
// parses.
func (s *stack) startWorker(name string) *worker {
	t := s.t
	t.Helper()
	dir := t.TempDir()
	hostID := fixture.RandomUUID(t)
	w := &worker{name: name, dir: dir, hostNQN: "nqn.2014-08.org.nvmexpress:uuid:" + hostID}
	nqnFile, idFile := filepath.Join(dir, "hostnqn"), filepath.Join(dir, "hostid")
	if err := os.WriteFile(nqnFile, []byte(w.hostNQN+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idFile, []byte(hostID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := "unix://" + filepath.Join(dir, "csi.sock")
	began := time.Now()
	p, err := startProc("pillar-node", filepath.Join(s.l.bin, "pillar-node"), nil, "-csi-endpoint", sock, "-node-name", name,
		"-state-dir", filepath.Join(dir, "state"), "-host-nqn-file", nqnFile, "-host-id-file", idFile, "-log-level", "debug",
		// The worker's directory plays kubelet's: its staging and target
		// paths (and csi-sanity's) are under it.
		"-kubelet-dir", dir,
		// No kubelet runs here to register with; two workers share the
		// guest, so neither takes the default health port.
		"-plugin-registration-dir=", "-health-address=")
	if err != nil {
		t.Fatal(err)
	}
	w.proc = p
	conn, err := grpc.NewClient(sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.exited() {
			p.terminate(30 * time.Second)
		}
		conn.Close()
		if t.Failed() {
			t.Logf("---- pillar-node %s log (%v) ----\n%s", name, p.err, p.log)
		}
	})
	waitProbe(t, "pillar-node "+name, csi.NewIdentityClient(conn), p.exited)
	w.api = csi.NewNodeClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	info, err := w.api.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w.nodeID = info.GetNodeId()
	if want, _ := export.FormatNodeID(name, w.hostNQN); w.nodeID != want {
		t.Fatalf("pillar-node %s: node_id %q, want %q", name, w.nodeID, want)
	}
	t.Logf("pillar-node %s: node_id %s (started in %v, guest time)", name, w.nodeID, time.Since(began).Round(10*time.Millisecond))
	s.workers = append(s.workers, w)
	return w
}

func (w *worker) staging(id string) string { return filepath.Join(w.dir, "staging", id) }
func (w *worker) target(id string) string  { return filepath.Join(w.dir, "pods", id, "mount") }

// ---------------------------------------------------------------- volumes

// volume is one volume made through the controller's CSI service.
type volume struct {
	s       *stack
	st      *store
	id      string
	nqn     string
	ctx     map[string]string // the volume context CreateVolume returned
	pubCtx  map[*worker]map[string]string
	deleted bool
}

func rwo() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func csiCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), csiTimeout)
	t.Cleanup(cancel)
	return ctx
}

func (s *stack) createRequest(st *store, name string, size int64) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{rwo()}, Parameters: st.params}
}

// createVolume calls CreateVolume with the StorageClass's parameters and
// registers a cleanup that dumps the PillarVolumeState on failure and
// tears down whatever the test left.
func (s *stack) createVolume(st *store, name string, size int64) *volume {
	t := s.t
	t.Helper()
	v := s.track(st, name)
	resp, err := s.ctrl.CreateVolume(csiCtx(t), s.createRequest(st, name, size))
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	v.accept(resp)
	return v
}

// track registers the cleanup of volume name before it exists.
func (s *stack) track(st *store, name string) *volume {
	t := s.t
	ident, err := export.For(name)
	if err != nil {
		t.Fatal(err)
	}
	v := &volume{s: s, st: st, id: name, nqn: ident.SubsystemNQN, pubCtx: map[*worker]map[string]string{}}
	t.Cleanup(func() {
		if t.Failed() {
			v.dumpState(t)
			t.Logf("---- nvmet subsystem %s ----\n%s", v.nqn, describeSubsystem(v.nqn))
		}
		if v.deleted {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), csiTimeout)
		defer cancel()
		for _, w := range s.workers {
			_, _ = w.api.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: w.target(v.id)})
			_, _ = w.api.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: w.staging(v.id)})
			_, _ = s.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: w.nodeID})
		}
		if _, err := s.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
			t.Errorf("cleanup: DeleteVolume %s: %v", v.id, err)
		}
	})
	return v
}

func (v *volume) accept(resp *csi.CreateVolumeResponse) {
	t := v.s.t
	t.Helper()
	if got := resp.GetVolume().GetVolumeId(); got != v.id {
		t.Fatalf("CreateVolume %s returned volume ID %q", v.id, got)
	}
	v.ctx = resp.GetVolume().GetVolumeContext()
	vc, err := export.ParseVolumeContext(v.id, v.ctx)
	if err != nil {
		t.Fatalf("the volume context pillar-node is to parse: %v", err)
	}
	if vc.Address.String() != "127.0.0.1" || int(vc.Port) != v.s.port || vc.SubsystemNQN != v.nqn {
		t.Errorf("volume context %v: want 127.0.0.1:%d and subsystem %s", v.ctx, v.s.port, v.nqn)
	}
}

// state reads the volume's PillarVolumeState.
func (v *volume) state(t testing.TB) (*v1alpha1.PillarVolumeState, error) {
	var pvs v1alpha1.PillarVolumeState
	err := v.s.l.get(v.id, &pvs)
	return &pvs, err
}

func (v *volume) dumpState(t testing.TB) {
	pvs, err := v.state(t)
	if err != nil {
		t.Logf("---- PillarVolumeState %s: %v", v.id, err)
		return
	}
	pvs.ManagedFields = nil
	b, _ := json.MarshalIndent(pvs, "", "  ")
	t.Logf("---- PillarVolumeState %s ----\n%s", v.id, b)
}

func (v *volume) publish(w *worker) {
	t := v.s.t
	t.Helper()
	resp, err := v.s.ctrl.ControllerPublishVolume(csiCtx(t), &csi.ControllerPublishVolumeRequest{VolumeId: v.id, NodeId: w.nodeID,
		VolumeCapability: rwo(), VolumeContext: v.ctx})
	if err != nil {
		t.Fatalf("ControllerPublishVolume %s to %s: %v", v.id, w.name, err)
	}
	v.pubCtx[w] = resp.GetPublishContext()
	if !allowed(v.nqn, w.hostNQN) {
		t.Errorf("after ControllerPublishVolume to %s, %s is not in the subsystem's allowed_hosts (%s)", w.name, w.hostNQN, describeSubsystem(v.nqn))
	}
}

func (v *volume) unpublish(w *worker) {
	t := v.s.t
	t.Helper()
	if _, err := v.s.ctrl.ControllerUnpublishVolume(csiCtx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: w.nodeID}); err != nil {
		t.Fatalf("ControllerUnpublishVolume %s from %s: %v", v.id, w.name, err)
	}
	if allowed(v.nqn, w.hostNQN) {
		t.Errorf("after ControllerUnpublishVolume from %s, %s is still in the subsystem's allowed_hosts", w.name, w.hostNQN)
	}
}

// stage stages and publishes the volume on w.
func (v *volume) stage(w *worker) {
	t := v.s.t
	t.Helper()
	ctx := csiCtx(t)
	if _, err := w.api.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: w.staging(v.id),
		VolumeCapability: rwo(), VolumeContext: v.ctx, PublishContext: v.pubCtx[w]}); err != nil {
		t.Fatalf("NodeStageVolume %s on %s: %v", v.id, w.name, err)
	}
	if _, err := w.api.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: w.staging(v.id),
		TargetPath: w.target(v.id), VolumeCapability: rwo(), VolumeContext: v.ctx, PublishContext: v.pubCtx[w]}); err != nil {
		t.Fatalf("NodePublishVolume %s on %s: %v", v.id, w.name, err)
	}
	if n := len(fixture.Controllers(t, v.nqn)); n != 1 {
		t.Errorf("after staging on %s: %d initiator controllers of %s, want 1", w.name, n, v.nqn)
	}
}

// unstage unpublishes and unstages the volume on w and checks that the
// initiator has no controller of the subsystem left.
func (v *volume) unstage(w *worker) {
	t := v.s.t
	t.Helper()
	ctx := csiCtx(t)
	if _, err := w.api.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: w.target(v.id)}); err != nil {
		t.Fatalf("NodeUnpublishVolume %s on %s: %v", v.id, w.name, err)
	}
	if _, err := w.api.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: w.staging(v.id)}); err != nil {
		t.Fatalf("NodeUnstageVolume %s on %s: %v", v.id, w.name, err)
	}
	if c := fixture.Controllers(t, v.nqn); len(c) != 0 {
		t.Errorf("NodeUnstageVolume on %s returned with initiator controllers %v of %s still there", w.name, c, v.nqn)
	}
}

// delete deletes the volume and checks that its backend volume, its
// subsystem and its PillarVolumeState are gone.
func (v *volume) delete() {
	t := v.s.t
	t.Helper()
	if _, err := v.s.ctrl.DeleteVolume(csiCtx(t), &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
		t.Fatalf("DeleteVolume %s: %v", v.id, err)
	}
	v.deleted = true
	if ids := v.st.backendVolumes(t); slices.Contains(ids, v.id) {
		t.Errorf("after DeleteVolume the %s backend still has volume %s (%v)", v.st.kind, v.id, ids)
	}
	if _, err := os.Stat(filepath.Join(fixture.NVMetRoot, "subsystems", v.nqn)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after DeleteVolume the nvmet subsystem %s is still there (%v)", v.nqn, err)
	}
	eventually(t, "PillarVolumeState "+v.id+" to be gone", statusTimeout, func() (bool, string) {
		pvs, err := v.state(t)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("err %v, finalizers %v, deletion %v", err, pvs.Finalizers, pvs.DeletionTimestamp)
	})
}

// ---------------------------------------------------------------- nvmet and the initiator

// allowed reports whether hostNQN is on the subsystem's access list.
func allowed(nqn, hostNQN string) bool {
	_, err := os.Lstat(filepath.Join(fixture.NVMetRoot, "subsystems", nqn, "allowed_hosts", hostNQN))
	return err == nil
}

func readAttr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return strings.TrimSpace(string(b))
}

// describeSubsystem is what configfs shows of a subsystem, for logs.
func describeSubsystem(nqn string) string {
	dir := filepath.Join(fixture.NVMetRoot, "subsystems", nqn)
	if _, err := os.Stat(dir); err != nil {
		return err.Error()
	}
	hosts, _ := filepath.Glob(filepath.Join(dir, "allowed_hosts", "*"))
	for i := range hosts {
		hosts[i] = filepath.Base(hosts[i])
	}
	links, _ := filepath.Glob(filepath.Join(fixture.NVMetRoot, "ports", "*", "subsystems", nqn))
	var ports []string
	for _, l := range links {
		p := filepath.Dir(filepath.Dir(l))
		ports = append(ports, fmt.Sprintf("port %s %s:%s", filepath.Base(p), readAttr(filepath.Join(p, "addr_traddr")), readAttr(filepath.Join(p, "addr_trsvcid"))))
	}
	ns := filepath.Join(dir, "namespaces", "1")
	return fmt.Sprintf("allow_any_host=%s allowed_hosts=%v serial=%s ns1: enable=%s device_path=%s uuid=%s; %v",
		readAttr(filepath.Join(dir, "attr_allow_any_host")), hosts, readAttr(filepath.Join(dir, "attr_serial")),
		readAttr(filepath.Join(ns, "enable")), readAttr(filepath.Join(ns, "device_path")), readAttr(filepath.Join(ns, "device_uuid")), ports)
}

// controllerStates are the states of the initiator's controllers of nqn
// (/sys/class/nvme/nvmeN/state, the same devices as
// /sys/class/nvme-fabrics/ctl/nvmeN).
func controllerStates(t testing.TB, nqn string) map[string]string {
	m := map[string]string{}
	for _, c := range fixture.Controllers(t, nqn) {
		m[c] = readAttr(filepath.Join("/sys/class/nvme", c, "state"))
	}
	return m
}

// ---------------------------------------------------------------- data

// fsBytes is the size of the filesystem mounted at path (statfs f_blocks
// × f_bsize).
func fsBytes(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Blocks) * st.Bsize
}

// dropCaches makes the next read of a file go to the device.
func dropCaches(t testing.TB) {
	t.Helper()
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		t.Fatalf("drop caches: %v", err)
	}
}

// stopwatch logs how long each step took, in guest time.
type stopwatch struct {
	t         testing.TB
	began, at time.Time
	steps     []string
}

func newStopwatch(t testing.TB) *stopwatch {
	now := time.Now()
	return &stopwatch{t: t, began: now, at: now}
}

func (s *stopwatch) step(format string, args ...any) {
	s.t.Helper()
	now := time.Now()
	line := fmt.Sprintf("%-58s %8v", fmt.Sprintf(format, args...), now.Sub(s.at).Round(time.Millisecond))
	s.steps = append(s.steps, line)
	s.t.Logf("step: %s (guest time)", line)
	s.at = now
}

// summary logs every step again, with the total.
func (s *stopwatch) summary(what string) {
	s.t.Logf("---- %s: steps (guest time) ----\n%s\n%-58s %8v", what, strings.Join(s.steps, "\n"), "total",
		time.Since(s.began).Round(time.Millisecond))
}

// codeOf is the gRPC code of err, OK for nil.
func codeOf(err error) codes.Code { return status.Code(err) }
