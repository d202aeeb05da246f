//go:build kernel

package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	hostA = "nqn.2014-08.io.pillar-csi.lab:host-a"
	hostB = "nqn.2014-08.io.pillar-csi.lab:host-b"
)

// labStore is a real store in the guest: what the agent is told, and a
// backend of the same store for the test's own look at it.
type labStore struct {
	name    string
	store   *agentv1.Store
	backend backends.Backend
}

func newLVM(t testing.TB, thin bool) labStore {
	t.Helper()
	return newLVMOf(t, thin, 1<<30)
}

// newLVMOf makes a volume group of size bytes (with a 512 MiB thin pool
// if thin).
func newLVMOf(t testing.TB, thin bool, size int64) labStore {
	t.Helper()
	o := fixture.VGOptions{Size: size}
	if thin {
		o.ThinPoolSize = 512 * mib
	}
	vg := fixture.NewVG(t, o)
	b, err := lvm.New(lvm.Config{VolumeGroup: vg.Name, ThinPool: vg.ThinPool})
	if err != nil {
		t.Fatal(err)
	}
	name := "lvm-linear"
	if thin {
		name = "lvm-thin"
	}
	return labStore{name: name, store: lvmStore(vg.Name, vg.ThinPool), backend: b}
}

func newZFS(t testing.TB) labStore {
	t.Helper()
	return newZFSOf(t, 512*mib)
}

// newZFSOf makes a pool of size bytes.
func newZFSOf(t testing.TB, size int64) labStore {
	t.Helper()
	p := fixture.NewZPool(t, fixture.PoolOptions{Size: size})
	b, err := zfs.New(zfs.Config{Pool: p.Name, ParentDataset: "pillar", Sparse: true})
	if err != nil {
		t.Fatal(err)
	}
	return labStore{name: "zfs-sparse", store: zfsStore(p.Name), backend: b}
}

func mustCreateExport(t *testing.T, c agentv1.AgentServiceClient, s labStore, id string, tk *agentv1.FencingToken, port int, acl bool) *agentv1.Export {
	t.Helper()
	if _, err := c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store, CapacityBytes: 64 * mib}); err != nil {
		t.Fatalf("CreateVolume %s: %v", id, err)
	}
	r, err := c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store,
		Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(port, acl)}})
	if err != nil {
		t.Fatalf("ExportVolume %s: %v", id, err)
	}
	return r.GetExport()
}

// TestLifecycle: create → export → connect → write/read → disconnect →
// unexport → delete, on each kind of store, with the access list enforced
// by the kernel.
func TestLifecycle(t *testing.T) {
	guest.RequireGuest(t)
	for _, c := range []struct {
		name string
		mk   func(testing.TB) labStore
	}{
		{"lvm-linear", func(t testing.TB) labStore { return newLVM(t, false) }},
		{"lvm-thin", func(t testing.TB) labStore { return newLVM(t, true) }},
		{"zfs-sparse", newZFS},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.mk(t)
			requireEmptyNvmet(t)
			a := startAgent(t, t.TempDir())
			id := "pvc-life-" + s.name
			ident, _ := export.For(id)
			tk := tok(fixture.RandomUUID(t), 1)
			port := fixture.FreeTCPPort(t)
			e := mustCreateExport(t, a.c, s, id, tk, port, true)
			if e.GetNamespaceUuid() != ident.UUID || e.GetSubsystemNqn() != ident.SubsystemNQN {
				t.Fatalf("export %v does not carry the derived identity %+v", e, ident)
			}
			// With the access list on, only an allowed host gets in.
			if c, err := fixture.Connect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: hostA}); err == nil {
				c.Disconnect(t)
				t.Fatal("a host that is not allowed connected")
			}
			if _, err := a.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tk, VolumeId: id, HostNqn: hostA}); err != nil {
				t.Fatal(err)
			}
			ctrl := fixture.MustConnect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: hostA})
			dev := fixture.NamespaceByUUID(t, ident.UUID)
			data := fixture.RandomBytes(t, int(mib))
			fixture.WriteAt(t, dev, 3*mib, data)
			if got := fixture.ReadAt(t, dev, 3*mib, len(data)); !bytes.Equal(got, data) {
				t.Fatal("the initiator read back other data than it wrote")
			}
			// Growing the volume while it is connected: the agent has
			// nvmet revalidate the namespace, and the initiator learns the
			// new size without reconnecting.
			if _, err := a.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store, CapacityBytes: 96 * mib}); err != nil {
				t.Fatal(err)
			}
			waitSize(t, dev, 96*mib)
			ctrl.Disconnect(t)

			// The data is on the backend volume itself.
			bdev, err := s.backend.DevicePath(ctxT(t), id)
			if err != nil {
				t.Fatal(err)
			}
			if got := fixture.ReadAt(t, bdev, 3*mib, len(data)); !bytes.Equal(got, data) {
				t.Fatalf("the target's %s does not hold what the initiator wrote", bdev)
			}
			if _, err := a.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tk, VolumeId: id}); err != nil {
				t.Fatal(err)
			}
			if st := readNvmet(t); len(st.Subsystems)+len(st.Ports)+len(st.Hosts) != 0 {
				t.Errorf("unexport left %+v", st)
			}
			if _, err := a.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.backend.Get(ctxT(t), id); !backends.IsNotFound(err) {
				t.Errorf("after DeleteVolume the volume is still there: %v", err)
			}
			if v, err := s.backend.List(ctxT(t)); err != nil || len(v) != 0 {
				t.Errorf("after DeleteVolume the store lists %v, %v", v, err)
			}
		})
	}
}

// TestExpandWithDisabledNamespace: an export left half-made (its
// namespace not enabled) must not make ExpandVolume fail, because nvmet
// refuses revalidate_size on a disabled namespace; the retried export then
// enables the namespace at the new size.
func TestExpandWithDisabledNamespace(t *testing.T) {
	guest.RequireGuest(t)
	s := newLVM(t, false)
	requireEmptyNvmet(t)
	a := startAgent(t, t.TempDir())
	const id = "pvc-expand-disabled"
	ident, _ := export.For(id)
	tk := tok(fixture.RandomUUID(t), 1)
	port := fixture.FreeTCPPort(t)
	mustCreateExport(t, a.c, s, id, tk, port, false)
	ns := filepath.Join("/sys/kernel/config/nvmet/subsystems", ident.SubsystemNQN, "namespaces", "1")
	if err := writeAttr(filepath.Join(ns, "enable"), "0"); err != nil {
		t.Fatal(err)
	}
	// The kernel rule this guards against.
	if err := writeAttr(filepath.Join(ns, "revalidate_size"), "1"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("revalidate_size of a disabled namespace: %v, want EINVAL", err)
	}
	if _, err := a.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store, CapacityBytes: 96 * mib}); err != nil {
		t.Fatalf("ExpandVolume with the namespace disabled: %v", err)
	}
	if v, err := s.backend.Get(ctxT(t), id); err != nil || v.SizeBytes != 96*mib {
		t.Fatalf("after ExpandVolume the volume is %+v, %v; want %d bytes", v, err, 96*mib)
	}
	if _, err := a.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store,
		Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(port, false)}}); err != nil {
		t.Fatalf("retried export: %v", err)
	}
	ctrl := fixture.MustConnect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: hostA})
	waitSize(t, fixture.NamespaceByUUID(t, ident.UUID), 96*mib)
	ctrl.Disconnect(t)
}

// writeAttr writes one configfs attribute as an operator's echo does.
func writeAttr(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(v))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestStaleGenerationChangesNothing: after generation 5 was accepted,
// every mutating call of generation 4 is refused, and neither configfs
// nor the store changes.
func TestStaleGenerationChangesNothing(t *testing.T) {
	guest.RequireGuest(t)
	for _, c := range []struct {
		name string
		mk   func(testing.TB) labStore
	}{
		{"lvm-linear", func(t testing.TB) labStore { return newLVM(t, false) }},
		{"zfs-sparse", newZFS},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.mk(t)
			requireEmptyNvmet(t)
			a := startAgent(t, t.TempDir())
			id := "pvc-stale-" + s.name
			uid := fixture.RandomUUID(t)
			port := fixture.FreeTCPPort(t)
			mustCreateExport(t, a.c, s, id, tok(uid, 5), port, true)
			if _, err := a.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tok(uid, 5), VolumeId: id, HostNqn: hostA}); err != nil {
				t.Fatal(err)
			}
			snapshot := func() string {
				vols, err := s.backend.List(ctxT(t))
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("%+v\n%+v", *readNvmet(t), vols)
			}
			before := snapshot()
			stale := tok(uid, 4)
			tr := &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(fixture.FreeTCPPort(t), false)}
			for name, call := range map[string]func() error{
				"CreateVolume": func() error {
					_, err := a.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: stale, VolumeId: id, Store: s.store, CapacityBytes: 128 * mib})
					return err
				},
				"ExpandVolume": func() error {
					_, err := a.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: stale, VolumeId: id, Store: s.store, CapacityBytes: 128 * mib})
					return err
				},
				"ExportVolume": func() error {
					_, err := a.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: stale, VolumeId: id, Store: s.store, Transport: tr})
					return err
				},
				"UnexportVolume": func() error {
					_, err := a.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: stale, VolumeId: id})
					return err
				},
				"AllowHost": func() error {
					_, err := a.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: stale, VolumeId: id, HostNqn: hostB})
					return err
				},
				"DenyHost": func() error {
					_, err := a.c.DenyHost(ctxT(t), &agentv1.DenyHostRequest{FencingToken: stale, VolumeId: id, HostNqn: hostA})
					return err
				},
				"DeleteVolume": func() error {
					_, err := a.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: stale, VolumeId: id, Store: s.store})
					return err
				},
				"DeleteVolume without a token": func() error {
					_, err := a.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{VolumeId: id, Store: s.store})
					return err
				},
			} {
				err := call()
				if status.Code(err) != codes.FailedPrecondition {
					t.Errorf("%s with a stale token: %v, want FAILED_PRECONDITION", name, err)
					continue
				}
				rej, ok := agentv1.FencingRejectionOf(err)
				if !ok {
					t.Errorf("%s: %v carries no FencingRejection", name, err)
				} else if want := agentv1.FencingRejection_REASON_STALE_GENERATION; name != "DeleteVolume without a token" && rej.GetReason() != want {
					t.Errorf("%s: reason %v, want %v", name, rej.GetReason(), want)
				}
			}
			r, err := a.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: []*agentv1.DesiredExport{{FencingToken: stale, VolumeId: id,
				Store: s.store, Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: tr.NvmeofTcp}}}})
			if err != nil || codes.Code(r.GetResults()[0].GetCode()) != codes.FailedPrecondition || r.GetResults()[0].GetFencingRejection() == nil {
				t.Errorf("Reconcile with a stale entry = %v, %v", r, err)
			}
			if after := snapshot(); after != before {
				t.Errorf("refused calls changed the node:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestKillDuringExport SIGKILLs an agent process while it is writing an
// export into configfs, starts a new one on the same marks, and retries.
func TestKillDuringExport(t *testing.T) {
	guest.RequireGuest(t)
	s := newLVM(t, false)
	requireEmptyNvmet(t)
	gen := t.TempDir()
	// A slice can still hold the whole export; then the attempt proves
	// only the restart, and the next one tries again.
	const attempts = 8
	interrupted := 0
	for i := range attempts {
		id := fmt.Sprintf("pvc-kill-%d", i)
		ident, _ := export.For(id)
		uid := fixture.RandomUUID(t)
		port := fixture.FreeTCPPort(t)
		ch := startChild(t, gen)
		if _, err := ch.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tok(uid, 1), VolumeId: id, Store: s.store, CapacityBytes: 16 * mib}); err != nil {
			t.Fatal(err)
		}
		exported := make(chan error, 1)
		go func() {
			_, err := ch.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tok(uid, 2), VolumeId: id, Store: s.store,
				Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(port, false)}})
			exported <- err
		}()
		// Run the agent in short slices (SIGCONT, then at once SIGSTOP) and
		// look at configfs between slices: as soon as the subsystem
		// directory, the export's first write, exists, the agent is
		// killed while stopped, part-way through the export's writes.
		subDir := filepath.Join("/sys/kernel/config/nvmet/subsystems", ident.SubsystemNQN)
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ch.stop(t)
			if _, err := os.Stat(subDir); err == nil {
				break
			}
			if time.Now().After(deadline) {
				ch.cmd.Process.Signal(syscall.SIGCONT)
				t.Fatalf("the export of %s never started: %v", id, <-exported)
			}
			// Let it run only for as long as the signals take.
			ch.cmd.Process.Signal(syscall.SIGCONT)
		}
		ch.kill(t)
		err := <-exported
		st := readNvmet(t)
		e, _ := st.Export(ident.SubsystemNQN)
		complete := len(e.Ports) == 1 && len(e.Namespaces) == 1 && e.Namespaces[0].Enabled
		t.Logf("attempt %d: the export call returned %v; configfs after the kill: %d namespaces (enabled %v), %d ports, model %q",
			i, status.Code(err), len(e.Namespaces), slices.ContainsFunc(e.Namespaces, func(n configfs.Namespace) bool { return n.Enabled }),
			len(e.Ports), e.Attrs.Model)
		if !complete {
			interrupted++
		}

		// A new agent process on the same marks: the mark of generation
		// 2 survived the kill, so generation 1 is now stale ...
		ch2 := startChild(t, gen)
		_, err = ch2.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tok(uid, 1), VolumeId: id})
		// (The refusal does not say the mark's generation: that stays in
		// the agent's log.)
		if rej, ok := agentv1.FencingRejectionOf(err); !ok || rej.GetReason() != agentv1.FencingRejection_REASON_STALE_GENERATION ||
			rej.GetMark() != nil {
			t.Errorf("after the restart, generation 1 = %v; want STALE_GENERATION, without the mark", err)
		}
		// ... and the retried export converges.
		r, err := ch2.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tok(uid, 2), VolumeId: id, Store: s.store,
			Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(port, false)}})
		if err != nil {
			t.Fatalf("retried export after the kill: %v", err)
		}
		e, ok := readNvmet(t).Export(ident.SubsystemNQN)
		if !ok || len(e.Ports) != 1 || e.Ports[0].TrSvcID != fmt.Sprint(port) || len(e.Namespaces) != 1 ||
			!e.Namespaces[0].Enabled || e.Namespaces[0].DeviceUUID != ident.UUID || !e.Attrs.AllowAnyHost {
			t.Fatalf("the retried export did not converge: %+v (response %v)", e, r)
		}
		ctrl := fixture.MustConnect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: hostA})
		dev := fixture.NamespaceByUUID(t, ident.UUID)
		data := fixture.RandomBytes(t, 64<<10)
		fixture.WriteAt(t, dev, 0, data)
		if got := fixture.ReadAt(t, dev, 0, len(data)); !bytes.Equal(got, data) {
			t.Fatal("read back other data through the converged export")
		}
		ctrl.Disconnect(t)
		if _, err := ch2.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tok(uid, 2), VolumeId: id}); err != nil {
			t.Fatal(err)
		}
		ch2.kill(t)
		if interrupted > 0 {
			break
		}
	}
	if interrupted == 0 {
		t.Errorf("in %d attempts the kill never landed before the export was complete", attempts)
	}
}

// TestWipeReconcile simulates a storage-node reboot: configfs loses every
// nvmet object and the agent restarts; Reconcile with the desired set
// brings every export back, and the initiator reads back its data.
func TestWipeReconcile(t *testing.T) {
	guest.RequireGuest(t)
	lv, zv := newLVM(t, false), newZFS(t)
	requireEmptyNvmet(t)
	gen := t.TempDir()
	a := startAgent(t, gen)
	port := fixture.FreeTCPPort(t)
	type vol struct {
		s     labStore
		id    string
		tk    *agentv1.FencingToken
		acl   bool
		hosts []string
		data  []byte
	}
	vols := []*vol{
		{s: lv, id: "pvc-wipe-lvm", tk: tok(fixture.RandomUUID(t), 3), acl: true, hosts: []string{hostA}},
		{s: zv, id: "pvc-wipe-zfs", tk: tok(fixture.RandomUUID(t), 7)},
	}
	for _, v := range vols {
		mustCreateExport(t, a.c, v.s, v.id, v.tk, port, v.acl)
		for _, h := range v.hosts {
			if _, err := a.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: v.tk, VolumeId: v.id, HostNqn: h}); err != nil {
				t.Fatal(err)
			}
		}
		ident, _ := export.For(v.id)
		ctrl := fixture.MustConnect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: hostA})
		v.data = fixture.RandomBytes(t, 256<<10)
		fixture.WriteAt(t, fixture.NamespaceByUUID(t, ident.UUID), 5*mib, v.data)
		ctrl.Disconnect(t)
	}
	before := readNvmet(t)

	a.stop()
	wipeNvmet(t)
	if st := readNvmet(t); len(st.Subsystems)+len(st.Ports)+len(st.Hosts) != 0 {
		t.Fatalf("the wipe left %+v", st)
	}
	// A subsystem another tool made while the agent was away.
	const foreign = "nqn.2014-08.org.example:not-pillar"
	if err := os.Mkdir(filepath.Join("/sys/kernel/config/nvmet/subsystems", foreign), 0o755); err != nil {
		t.Fatal(err)
	}

	a2 := startAgent(t, gen)
	var desired []*agentv1.DesiredExport
	for _, v := range vols {
		desired = append(desired, &agentv1.DesiredExport{FencingToken: v.tk, VolumeId: v.id, Store: v.s.store,
			Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: tcp(port, v.acl)}, AllowedHostNqns: v.hosts})
	}
	r, err := a2.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: desired})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r.GetResults() {
		if res.GetCode() != int32(codes.OK) {
			t.Errorf("reconcile %s: %v %s", res.GetVolumeId(), codes.Code(res.GetCode()), res.GetMessage())
		}
	}
	if len(r.GetRemovedSubsystemNqns())+len(r.GetRetainedSubsystemNqns()) != 0 {
		t.Errorf("reconcile removed %v, retained %v; want neither", r.GetRemovedSubsystemNqns(), r.GetRetainedSubsystemNqns())
	}
	after := readNvmet(t)
	for _, v := range vols {
		ident, _ := export.For(v.id)
		want, _ := before.Export(ident.SubsystemNQN)
		got, ok := after.Export(ident.SubsystemNQN)
		if !ok || !equalExports(want, got) {
			t.Errorf("export of %s after reconcile:\n got %+v\nwant %+v", v.id, got, want)
		}
	}
	if _, ok := after.Subsystem(foreign); !ok {
		t.Error("reconcile removed a subsystem it does not own")
	}
	if l, err := a2.c.ListExports(ctxT(t), &agentv1.ListExportsRequest{}); err != nil || len(l.GetExports()) != len(vols) {
		t.Errorf("ListExports = %v, %v", l, err)
	}
	for _, v := range vols {
		ident, _ := export.For(v.id)
		ctrl := fixture.MustConnect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: hostA})
		if got := fixture.ReadAt(t, fixture.NamespaceByUUID(t, ident.UUID), 5*mib, len(v.data)); !bytes.Equal(got, v.data) {
			t.Errorf("%s: the reconnected initiator reads other data", v.id)
		}
		ctrl.Disconnect(t)
	}
	if _, err := a2.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: desired}); err != nil {
		t.Fatal(err)
	}
	if again := readNvmet(t); fmt.Sprintf("%+v", again.Subsystems) != fmt.Sprintf("%+v", after.Subsystems) {
		t.Error("a repeated reconcile changed configfs")
	}
}

// equalExports compares what Apply controls; the port ID may differ after
// a wipe only if another port took the preferred one, which here none did.
func equalExports(a, b configfs.Export) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) && slices.Equal(a.AllowedHosts, b.AllowedHosts)
}
