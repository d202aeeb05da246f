package configfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

var (
	tcp4420 = Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "127.0.0.1", TrSvcID: "4420"}
	tcp4421 = Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "127.0.0.1", TrSvcID: "4421"}
	tcp6    = Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "::1", TrSvcID: "4420"}
)

const (
	hostA = "nqn.2014-08.org.nvmexpress:uuid:0f2c7a9e-3c33-4c59-a2e5-7d7f7b6b1a01"
	hostB = "nqn.2014-08.org.nvmexpress:uuid:0f2c7a9e-3c33-4c59-a2e5-7d7f7b6b1a02"
	hostC = "nqn.2014-08.org.nvmexpress:uuid:0f2c7a9e-3c33-4c59-a2e5-7d7f7b6b1a03"
)

// device returns a regular file standing in for a block device.
func device(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func fullExport(t *testing.T, n int) Export {
	return Export{
		NQN: fmt.Sprintf("nqn.2024-01.io.pillar-csi:vol-%d", n),
		Attrs: SubsystemAttrs{
			Version: "1.3", Serial: fmt.Sprintf("pillar%d", n), Model: "pillar-csi",
			CntlIDMin: 1, CntlIDMax: 65519, QIDMax: 128,
		},
		Namespaces: []Namespace{{
			NSID: 1, DevicePath: device(t, "dev"), ANAGroupID: 1, Enabled: true,
			DeviceUUID:  fmt.Sprintf("6e7a1f0c-9d2b-4f7e-8a8b-%012d", n),
			DeviceNGUID: fmt.Sprintf("6e7a1f0c-9d2b-4f7e-8a8b-%012d", n),
		}},
		Ports:        []Address{tcp4420},
		AllowedHosts: []string{hostA},
	}
}

func mustApply(t *testing.T, fs *FS, e Export) {
	t.Helper()
	if err := fs.Apply(context.Background(), e); err != nil {
		t.Fatalf("Apply(%s): %v", e.NQN, err)
	}
}

func mustRead(t *testing.T, fs *FS) *State {
	t.Helper()
	st, err := fs.Read(context.Background())
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return st
}

// checkReadBack fails unless reading the tree gives back exactly e.
func checkReadBack(t *testing.T, fs *FS, e Export) {
	t.Helper()
	want, err := e.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := mustRead(t, fs).Export(e.NQN)
	if !ok {
		t.Fatalf("subsystem %s not found", e.NQN)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("read-back differs from applied export (-applied +read):\n%s", diff)
	}
}

func TestApplyFromScratchAndReadBack(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)

	st := mustRead(t, fs)
	if len(st.Ports) != 1 || st.Ports[0].ID != PreferredPortID(tcp4420) {
		t.Fatalf("ports = %+v, want one port with ID %d", st.Ports, PreferredPortID(tcp4420))
	}
	if got := st.Hosts; len(got) != 1 || got[0].NQN != hostA {
		t.Fatalf("hosts = %+v", got)
	}

	// The kernel-ordering rules: the namespace is enabled after its
	// attributes, the access list is set before the port link.
	ops := sim.mutations()
	idx := func(prefix string) int {
		return slices.IndexFunc(ops, func(s string) bool { return strings.HasPrefix(s, prefix) })
	}
	enable := idx("write subsystems/" + e.NQN + "/namespaces/1/enable=1")
	devpath := idx("write subsystems/" + e.NQN + "/namespaces/1/device_path=")
	hostLink := idx("symlink subsystems/" + e.NQN + "/allowed_hosts/")
	portLink := idx("symlink ports/")
	if enable < 0 || devpath < 0 || hostLink < 0 || portLink < 0 ||
		devpath > enable || enable > portLink || hostLink > portLink {
		t.Errorf("unexpected operation order:\n%s", strings.Join(ops, "\n"))
	}
}

func TestApplyIdenticalWritesNothing(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	sim.mutations()
	mustApply(t, fs, e)
	if ops := sim.mutations(); len(ops) != 0 {
		t.Errorf("identical Apply changed the tree:\n%s", strings.Join(ops, "\n"))
	}
}

func TestSubsystemsShareOnePort(t *testing.T) {
	_, fs := newKernelSim(t)
	var es []Export
	for i := 1; i <= 3; i++ {
		e := fullExport(t, i)
		es = append(es, e)
		mustApply(t, fs, e)
	}
	st := mustRead(t, fs)
	if len(st.Ports) != 1 {
		t.Fatalf("got %d ports, want 1 shared port: %+v", len(st.Ports), st.Ports)
	}
	want := []string{es[0].NQN, es[1].NQN, es[2].NQN}
	if diff := cmp.Diff(want, st.Ports[0].Subsystems); diff != "" {
		t.Errorf("port links (-want +got):\n%s", diff)
	}
	// Removing one keeps the port for the others; removing the last
	// removes the port and the host entry too.
	ctx := context.Background()
	if err := fs.Remove(ctx, es[1].NQN); err != nil {
		t.Fatal(err)
	}
	st = mustRead(t, fs)
	if len(st.Ports) != 1 || len(st.Ports[0].Subsystems) != 2 || len(st.Hosts) != 1 {
		t.Fatalf("after removing one: %+v", st)
	}
	for _, e := range []Export{es[0], es[2]} {
		if err := fs.Remove(ctx, e.NQN); err != nil {
			t.Fatal(err)
		}
	}
	if st := mustRead(t, fs); len(st.Subsystems)+len(st.Ports)+len(st.Hosts) != 0 {
		t.Fatalf("tree not empty after removing everything: %+v", st)
	}
}

func TestChangeAllowedHostsLive(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	e.AllowedHosts = []string{hostA, hostB}
	mustApply(t, fs, e)
	port := mustRead(t, fs).Ports[0].ID
	portLink := fmt.Sprintf("ports/%d/subsystems/%s", port, e.NQN)
	sim.mutations()

	// A host added: nothing else moves.
	e.AllowedHosts = []string{hostA, hostB, hostC}
	mustApply(t, fs, e)
	want := []string{
		"mkdir hosts/" + hostC,
		"symlink subsystems/" + e.NQN + "/allowed_hosts/" + hostC,
	}
	if diff := cmp.Diff(want, sim.mutations()); diff != "" {
		t.Errorf("adding a host: operations (-want +got):\n%s", diff)
	}

	// A host taken away: the port link is dropped first (which ends the
	// controllers every host has) and made again last; the namespace and
	// the port itself stay.
	e.AllowedHosts = []string{hostB, hostC}
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	want = []string{
		"unlink " + portLink,
		"unlink subsystems/" + e.NQN + "/allowed_hosts/" + hostA,
		"rmdir hosts/" + hostA,
		"symlink " + portLink,
	}
	if diff := cmp.Diff(want, sim.mutations()); diff != "" {
		t.Errorf("taking a host away: operations (-want +got):\n%s", diff)
	}
}

// A narrowing whose access-list change fails makes the port links again
// before it returns the error, so the subsystem stays reachable for the
// hosts still listed; applied again, it narrows (and drops the links)
// again. One whose links cannot be made again returns that error, and the
// next Apply of the export makes them.
func TestNarrowingFails(t *testing.T) {
	for _, failOp := range []string{"unlink allowed_hosts", "symlink ports"} {
		t.Run(failOp, func(t *testing.T) {
			sim, fs := newKernelSim(t)
			e := fullExport(t, 1)
			e.AllowedHosts = []string{hostA, hostB}
			mustApply(t, fs, e)
			e.AllowedHosts = []string{hostB}
			op, part, _ := strings.Cut(failOp, " ")
			sim.failAt = func(o, path string) error {
				if o == op && strings.Contains(path, "/"+part+"/") {
					return syscall.EIO
				}
				return nil
			}
			sim.mutations()
			if err := fs.Apply(context.Background(), e); !errorsIsErrno(err, syscall.EIO) {
				t.Fatalf("Apply with injected failure = %v, want EIO", err)
			}
			if ops := sim.mutations(); len(ops) == 0 || !strings.HasPrefix(ops[0], "unlink ports/") {
				t.Errorf("the failed narrowing did not drop the port link first: %q", ops)
			}
			linked := len(mustRead(t, fs).Ports[0].Subsystems) == 1
			if want := failOp != "symlink ports"; linked != want {
				t.Errorf("after the failure the subsystem is linked to its port: %v, want %v", linked, want)
			}
			sim.failAt = nil
			mustApply(t, fs, e)
			checkReadBack(t, fs, e)
			if st := mustRead(t, fs); len(st.Ports) != 1 || len(st.Ports[0].Subsystems) != 1 {
				t.Errorf("ports after the retry: %+v", st.Ports)
			}
		})
	}
}

// A narrowing that also moves the export to another port leaves no port
// behind, and one whose address has a second, foreign port links back to
// the port it had.
func TestNarrowingWithPorts(t *testing.T) {
	t.Run("moved", func(t *testing.T) {
		_, fs := newKernelSim(t)
		e := fullExport(t, 1)
		e.AllowedHosts = []string{hostA, hostB}
		mustApply(t, fs, e)
		e.AllowedHosts, e.Ports = []string{hostB}, []Address{tcp4421}
		mustApply(t, fs, e)
		checkReadBack(t, fs, e)
		if st := mustRead(t, fs); len(st.Ports) != 1 || st.Ports[0].Address != tcp4421 {
			t.Errorf("ports %+v, want only the one on %v", st.Ports, tcp4421)
		}
	})
	t.Run("same port", func(t *testing.T) {
		sim, fs := newKernelSim(t)
		e := fullExport(t, 1)
		e.AllowedHosts = []string{hostA, hostB}
		mustApply(t, fs, e)
		id := mustRead(t, fs).Ports[0].ID
		// A disabled port on the same address that sorts first, which
		// Apply would choose for a subsystem linked nowhere.
		foreignPort(t, sim, fs, "1", tcp4420)
		e.AllowedHosts = []string{hostB}
		mustApply(t, fs, e)
		for _, p := range mustRead(t, fs).Ports {
			if linked := len(p.Subsystems) == 1; linked != (p.ID == id) {
				t.Errorf("port %d has links %v; the subsystem belongs on port %d", p.ID, p.Subsystems, id)
			}
		}
	})
}

func TestACLOffAndOn(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	e.AllowedHosts = []string{hostA, hostB}
	mustApply(t, fs, e)

	// Off: links must go before allow_any_host=1 (the kernel refuses
	// otherwise, and the simulator models that).
	e.Attrs.AllowAnyHost, e.AllowedHosts = true, nil
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	if st := mustRead(t, fs); len(st.Hosts) != 0 {
		t.Errorf("unused host entries left: %+v", st.Hosts)
	}

	// On again: allow_any_host=0 before the links, inside the port link
	// being dropped and made again, since any host may be connected.
	sim.mutations()
	e.Attrs.AllowAnyHost, e.AllowedHosts = false, []string{hostC}
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	ops := sim.mutations()
	if len(ops) < 2 || !strings.HasPrefix(ops[0], "unlink ports/") || !strings.HasPrefix(ops[len(ops)-1], "symlink ports/") {
		t.Errorf("switching the access list on: operations %q, want the port link dropped first and made again last", ops)
	}
}

func TestAllowAnyHostWithHostsIsInvalid(t *testing.T) {
	_, fs := newKernelSim(t)
	e := fullExport(t, 1)
	e.Attrs.AllowAnyHost = true
	err := fs.Apply(context.Background(), e)
	if !IsInvalid(err) {
		t.Fatalf("Apply = %v, want an invalid-configuration error", err)
	}
	if st := mustRead(t, fs); len(st.Subsystems) != 0 {
		t.Errorf("validation failure touched the tree: %+v", st)
	}
}

func TestRemoveWithHostsAndSharedHost(t *testing.T) {
	_, fs := newKernelSim(t)
	a, b := fullExport(t, 1), fullExport(t, 2)
	a.AllowedHosts = []string{hostA, hostB}
	b.AllowedHosts = []string{hostB}
	mustApply(t, fs, a)
	mustApply(t, fs, b)
	ctx := context.Background()
	if err := fs.Remove(ctx, a.NQN); err != nil {
		t.Fatal(err)
	}
	st := mustRead(t, fs)
	if diff := cmp.Diff([]Host{{NQN: hostB}}, st.Hosts); diff != "" {
		t.Errorf("hosts after removing a (-want +got):\n%s", diff)
	}
	checkReadBack(t, fs, b)
	// Idempotent.
	if err := fs.Remove(ctx, a.NQN); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

func TestApplyAfterPartialFailure(t *testing.T) {
	for _, failOp := range []string{"enable", "allowed_hosts", "ports"} {
		t.Run(failOp, func(t *testing.T) {
			sim, fs := newKernelSim(t)
			e := fullExport(t, 1)
			sim.failAt = func(op, path string) error {
				switch {
				case failOp == "enable" && op == "write" && strings.HasSuffix(path, "/enable"),
					failOp == "allowed_hosts" && op == "symlink" && strings.Contains(path, "/allowed_hosts/"),
					failOp == "ports" && op == "symlink" && strings.Contains(path, "/ports/"):
					return syscall.EIO
				}
				return nil
			}
			err := fs.Apply(context.Background(), e)
			if !errorsIsErrno(err, syscall.EIO) {
				t.Fatalf("Apply with injected failure = %v, want EIO", err)
			}
			sim.failAt = nil
			mustApply(t, fs, e)
			checkReadBack(t, fs, e)
			if st := mustRead(t, fs); len(st.Ports) != 1 {
				t.Errorf("ports = %+v", st.Ports)
			}
		})
	}
}

// TestApplyWaitsForTheDevice: a namespace's enable that fails with ENOENT
// or ENXIO (a new zvol's device while ZFS removes it and makes it again)
// is tried again until the device opens; one that never opens fails after
// enableRetryFor, or sooner when the context ends, leaving the namespace
// for the next Apply; another errno of the enable, and an ENOENT of any
// other write, are not waited for.
func TestApplyWaitsForTheDevice(t *testing.T) {
	// failingWith makes the writes to attributes named attr fail with
	// errno the first times times (-1: always), and counts the writes.
	failingWith := func(sim *kernelSim, attr string, times int, errno syscall.Errno) *atomic.Int32 {
		var n atomic.Int32
		sim.failAt = func(op, path string) error {
			if op == "write" && strings.HasSuffix(path, "/namespaces/1/"+attr) {
				if k := n.Add(1); times < 0 || k <= int32(times) {
					return errno
				}
			}
			return nil
		}
		return &n
	}
	failing := func(sim *kernelSim, attr string, times int) *atomic.Int32 {
		return failingWith(sim, attr, times, syscall.ENOENT)
	}

	// ENOENT (the node gone) and ENXIO (the disk being removed) both
	// come while ZFS makes a new zvol's device again.
	for _, errno := range []syscall.Errno{syscall.ENOENT, syscall.ENXIO} {
		t.Run("opens at the fourth try after "+unix.ErrnoName(errno), func(t *testing.T) {
			sim, fs := newKernelSim(t)
			e := fullExport(t, 1)
			n := failingWith(sim, "enable", 3, errno)
			mustApply(t, fs, e)
			if got := n.Load(); got != 4 {
				t.Errorf("enable written %d times, want 4", got)
			}
			checkReadBack(t, fs, e)
		})
	}

	t.Run("another error is not waited for", func(t *testing.T) {
		sim, fs := newKernelSim(t)
		n := failingWith(sim, "enable", -1, syscall.EINVAL)
		if err := fs.Apply(context.Background(), fullExport(t, 1)); !errorsIsErrno(err, syscall.EINVAL) {
			t.Fatalf("Apply whose enable fails with EINVAL = %v, want EINVAL", err)
		}
		if got := n.Load(); got != 1 {
			t.Errorf("enable written %d times, want once", got)
		}
	})

	t.Run("never opens", func(t *testing.T) {
		sim, fs := newKernelSim(t)
		e := fullExport(t, 1)
		n := failing(sim, "enable", -1)
		began := time.Now()
		if err := fs.Apply(context.Background(), e); !errorsIsErrno(err, syscall.ENOENT) {
			t.Fatalf("Apply of a device that never opens = %v, want ENOENT", err)
		}
		if took := time.Since(began); took < enableRetryFor {
			t.Errorf("gave up after %v, before enableRetryFor (%v)", took, enableRetryFor)
		}
		if got := n.Load(); got < 3 || got > 20 {
			t.Errorf("enable written %d times in %v, want a few", got, enableRetryFor)
		}
		sim.failAt = nil
		mustApply(t, fs, e)
		checkReadBack(t, fs, e)
	})

	t.Run("context ends", func(t *testing.T) {
		sim, fs := newKernelSim(t)
		failing(sim, "enable", -1)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		began := time.Now()
		if err := fs.Apply(ctx, fullExport(t, 1)); !errorsIsErrno(err, syscall.ENOENT) {
			t.Fatalf("Apply whose context ends while it waits = %v, want the enable's ENOENT", err)
		}
		if took := time.Since(began); took >= enableRetryFor {
			t.Errorf("went on %v after its context ended", took)
		}
	})

	t.Run("another write", func(t *testing.T) {
		sim, fs := newKernelSim(t)
		n := failing(sim, "device_path", -1)
		if err := fs.Apply(context.Background(), fullExport(t, 1)); !errorsIsErrno(err, syscall.ENOENT) {
			t.Fatalf("Apply whose device_path write fails = %v, want ENOENT", err)
		}
		if got := n.Load(); got != 1 {
			t.Errorf("device_path written %d times, want once", got)
		}
	})
}

func errorsIsErrno(err error, errno syscall.Errno) bool {
	var e *Error
	return err != nil && errors.As(err, &e) && e.Err == errno
}

func TestNamespaceChangeDisablesAroundWrites(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	sim.mutations()

	e.Namespaces[0].DevicePath = device(t, "other")
	e.Namespaces[0].ANAGroupID = 1
	e.Namespaces = append(e.Namespaces, Namespace{
		NSID: 7, DevicePath: device(t, "seven"), Enabled: true,
		DeviceUUID: "6e7a1f0c-9d2b-4f7e-8a8b-000000000007",
	})
	mustApply(t, fs, e)
	ops := sim.mutations()
	ns1 := "subsystems/" + e.NQN + "/namespaces/1/"
	want := []string{
		"write " + ns1 + "enable=0",
		"write " + ns1 + "device_path=" + e.Namespaces[0].DevicePath,
		"write " + ns1 + "enable=1",
		"mkdir subsystems/" + e.NQN + "/namespaces/7",
		"write subsystems/" + e.NQN + "/namespaces/7/device_path=" + e.Namespaces[1].DevicePath,
		"write subsystems/" + e.NQN + "/namespaces/7/device_uuid=" + e.Namespaces[1].DeviceUUID,
		"write subsystems/" + e.NQN + "/namespaces/7/enable=1",
	}
	if diff := cmp.Diff(want, ops); diff != "" {
		t.Errorf("operations (-want +got):\n%s", diff)
	}

	// Dropping namespace 1 removes it while enabled.
	e.Namespaces = e.Namespaces[1:]
	e.Namespaces[0].ANAGroupID = 1 // read back as the default group
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
}

func TestMovePortAndIPv6(t *testing.T) {
	_, fs := newKernelSim(t)
	e := fullExport(t, 1)
	e.Ports = []Address{tcp4420, tcp6}
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)

	e.Ports = []Address{tcp4421}
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	st := mustRead(t, fs)
	if len(st.Ports) != 1 || st.Ports[0].Address != tcp4421 {
		t.Errorf("old ports not removed: %+v", st.Ports)
	}
}

func TestIPv6AddressIsCanonical(t *testing.T) {
	_, fs := newKernelSim(t)
	e := fullExport(t, 1)
	e.Ports = []Address{{TrType: "tcp", AdrFam: "ipv6", TrAddr: "0:0:0:0:0:0:0:1", TrSvcID: "4420"}}
	mustApply(t, fs, e)
	// The same port, written the short way, is found and shared.
	e2 := fullExport(t, 2)
	e2.Ports = []Address{tcp6}
	mustApply(t, fs, e2)
	if st := mustRead(t, fs); len(st.Ports) != 1 || st.Ports[0].Address.TrAddr != "::1" {
		t.Errorf("ports = %+v", st.Ports)
	}
}

func TestCntlIDOrdering(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	e.Attrs.CntlIDMin, e.Attrs.CntlIDMax = 100, 200
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	// Moving the range above the current maximum needs max first; the
	// simulator refuses min >= max like the kernel.
	e.Attrs.CntlIDMin, e.Attrs.CntlIDMax = 300, 400
	sim.mutations()
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	e.Attrs.CntlIDMin, e.Attrs.CntlIDMax = 10, 20
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
}

func TestPortIDCollisionMovesToNextFreeID(t *testing.T) {
	sim, fs := newKernelSim(t)
	// Another tool holds the preferred ID with a different address.
	id := PreferredPortID(tcp4420)
	if err := sim.mkdir(fs.portDir(uitoa(uint64(id)))); err != nil {
		t.Fatal(err)
	}
	mustApply(t, fs, fullExport(t, 1))
	st := mustRead(t, fs)
	if len(st.Ports) != 2 {
		t.Fatalf("ports = %+v", st.Ports)
	}
	var got uint16
	for _, p := range st.Ports {
		if p.Address == tcp4420 {
			got = p.ID
		}
	}
	if want := id%maxPortID + 1; got != want {
		t.Errorf("port ID = %d, want %d (the next after the taken %d)", got, want, id)
	}
}

func TestPreferredPortIDIsStable(t *testing.T) {
	again := tcp4420
	if PreferredPortID(tcp4420) != PreferredPortID(again) ||
		PreferredPortID(tcp4420) == PreferredPortID(tcp4421) {
		t.Fatal("port IDs are not a function of the address")
	}
	long := Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "0::1", TrSvcID: "4420"}
	if PreferredPortID(long) != PreferredPortID(tcp6) {
		t.Error("equivalent IPv6 spellings got different port IDs")
	}
	for _, a := range []Address{tcp4420, tcp4421, tcp6} {
		if id := PreferredPortID(a); id == 0 || id > maxPortID {
			t.Errorf("PreferredPortID(%v) = %d out of range", a, id)
		}
	}
}

func TestRemoveFindsLinksNamedByOtherTools(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	// Another tool linked the subsystem from a second port under a name
	// of its own.
	port := fs.portDir("9")
	if err := sim.mkdir(port); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"addr_trtype": "tcp", "addr_adrfam": "ipv4", "addr_traddr": "127.0.0.2", "addr_trsvcid": "4420"} {
		if err := sim.writeAttr(port+"/"+name, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.symlink(fs.subsystemDir(e.NQN), port+"/subsystems/custom-name"); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, fs).Ports; len(got) != 2 || got[1].Subsystems[0] != e.NQN {
		t.Fatalf("Read does not resolve the link target: %+v", got)
	}
	if err := fs.Remove(context.Background(), e.NQN); err != nil {
		t.Fatal(err)
	}
	if st := mustRead(t, fs); len(st.Subsystems)+len(st.Ports)+len(st.Hosts) != 0 {
		t.Fatalf("tree not empty: %+v", st)
	}
}

func TestConcurrentApplyRemoveSharingAPort(t *testing.T) {
	_, fs := newKernelSim(t)
	ctx := context.Background()
	const n = 16
	exports := make([]Export, n)
	for i := range exports {
		exports[i] = fullExport(t, i)
		exports[i].AllowedHosts = []string{hostA, hostB}
	}
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for i := range exports {
			wg.Go(func() {
				if err := fs.Apply(ctx, exports[i]); err != nil {
					errs <- err
					return
				}
				if i%2 == 0 {
					if err := fs.Remove(ctx, exports[i].NQN); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		st := mustRead(t, fs)
		if len(st.Subsystems) != n/2 || len(st.Ports) != 1 || len(st.Ports[0].Subsystems) != n/2 || len(st.Hosts) != 2 {
			t.Fatalf("round %d: %d subsystems, ports %+v, hosts %+v", round, len(st.Subsystems), st.Ports, st.Hosts)
		}
		for i := 1; i < n; i += 2 {
			checkReadBack(t, fs, exports[i])
		}
	}
	var wg sync.WaitGroup
	for i := range exports {
		wg.Go(func() {
			if err := fs.Remove(ctx, exports[i].NQN); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := mustRead(t, fs); len(st.Subsystems)+len(st.Ports)+len(st.Hosts) != 0 {
		t.Fatalf("tree not empty: %+v", st)
	}
}

func TestApplyHonoursContext(t *testing.T) {
	_, fs := newKernelSim(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := fs.Apply(ctx, fullExport(t, 1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a cancelled context = %v", err)
	}
	if err := fs.Remove(ctx, fullExport(t, 1).NQN); !errors.Is(err, context.Canceled) {
		t.Fatalf("Remove with a cancelled context = %v", err)
	}
}

func TestKernelErrorsSurfaceWithPath(t *testing.T) {
	_, fs := newKernelSim(t)
	e := fullExport(t, 1)
	e.Namespaces[0].DevicePath = "/nonexistent/device"
	err := fs.Apply(context.Background(), e)
	if !IsNotExist(err) {
		t.Fatalf("Apply with a missing device = %v, want not-exist", err)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Op != "write" || !strings.HasSuffix(ce.Path, "/namespaces/1/enable") {
		t.Fatalf("error %#v does not name the enable write", err)
	}
}

// foreignPort makes ports/<name> on addr in the simulator, as another tool
// would.
func foreignPort(t *testing.T, sim *kernelSim, fs *FS, name string, addr Address) string {
	t.Helper()
	dir := fs.portDir(name)
	if err := sim.mkdir(dir); err != nil {
		t.Fatal(err)
	}
	for attr, v := range map[string]string{"addr_trtype": addr.TrType, "addr_adrfam": addr.AdrFam, "addr_traddr": addr.TrAddr, "addr_trsvcid": addr.TrSvcID} {
		if err := sim.writeAttr(dir+"/"+attr, v); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestNonDecimalNames(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	// Another tool's port 0x10 on the export's address, and a namespace
	// 0x1 of the export's subsystem.
	p := foreignPort(t, sim, fs, "0x10", tcp4420)
	for _, d := range []string{fs.subsystemDir(e.NQN), fs.namespaceDir(e.NQN, "0x1"), fs.namespaceDir(e.NQN, "0x7")} {
		if err := sim.mkdir(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.mkdir(p + "/ana_groups/0x2"); err != nil {
		t.Fatal(err)
	}
	st := mustRead(t, fs)
	if len(st.Ports) != 1 || st.Ports[0].ID != 16 || st.Ports[0].Address != tcp4420 || len(st.Ports[0].ANAGroups) != 2 || st.Ports[0].ANAGroups[1].ID != 2 {
		t.Errorf("port 0x10 read as %+v", st.Ports)
	}
	if sub, _ := st.Subsystem(e.NQN); len(sub.Namespaces) != 2 || sub.Namespaces[0].NSID != 1 || sub.Namespaces[1].NSID != 7 {
		t.Errorf("namespaces 0x1 and 0x7 read as %+v", sub.Namespaces)
	}

	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	st = mustRead(t, fs)
	if len(st.Ports) != 1 || st.Ports[0].ID != 16 {
		t.Errorf("Apply did not share port 0x10: %+v", st.Ports)
	}
	ents, err := os.ReadDir(fs.subsystemDir(e.NQN) + "/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	// fullExport lists NSID 1 only: 0x1 is converged in place, 0x7
	// removed.
	if !slices.Equal(names, []string{"0x1"}) {
		t.Errorf("namespace directories after Apply: %v", names)
	}
	if err := fs.Remove(context.Background(), e.NQN); err != nil {
		t.Fatal(err)
	}
}

func TestDuplicateNSIDDirectoryIsRemoved(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	// Another tool added 0x1, a second directory for NSID 1.
	if err := sim.mkdir(fs.namespaceDir(e.NQN, "0x1")); err != nil {
		t.Fatal(err)
	}
	sim.mutations()
	mustApply(t, fs, e)
	if diff := cmp.Diff([]string{"rmdir subsystems/" + e.NQN + "/namespaces/0x1"}, sim.mutations()); diff != "" {
		t.Errorf("operations (-want +got):\n%s", diff)
	}
	checkReadBack(t, fs, e)
}

// foreignEnabledPort is foreignPort with another tool's subsystem linked,
// which enables it.
func foreignEnabledPort(t *testing.T, sim *kernelSim, fs *FS, name string, addr Address) string {
	t.Helper()
	dir := foreignPort(t, sim, fs, name, addr)
	other := fs.subsystemDir("nqn.2024-01.io.example:other-tool")
	if err := sim.mkdir(other); err != nil && !IsExist(err) {
		t.Fatal(err)
	}
	if err := sim.symlink(other, dir+"/subsystems/other"); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestApplySharesForeignPortZero(t *testing.T) {
	sim, fs := newKernelSim(t)
	foreignEnabledPort(t, sim, fs, "0", tcp4420)
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	if st := mustRead(t, fs); len(st.Ports) != 1 || st.Ports[0].ID != 0 || len(st.Ports[0].Subsystems) != 2 {
		t.Errorf("ports = %+v, want port 0 shared", st.Ports)
	}
}

func TestApplyPrefersTheEnabledPortOfAnAddress(t *testing.T) {
	sim, fs := newKernelSim(t)
	foreignPort(t, sim, fs, "100", tcp4420) // disabled, first in name order
	foreignEnabledPort(t, sim, fs, "200", tcp4420)
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	checkReadBack(t, fs, e)
	for _, p := range mustRead(t, fs).Ports {
		if linked := slices.Contains(p.Subsystems, e.NQN); linked != (p.ID == 200) {
			t.Errorf("port %d: linked %v; want the export on port 200 only", p.ID, linked)
		}
	}
}

func TestApplyRemovesUnlistedPortLinkUnderAnotherName(t *testing.T) {
	sim, fs := newKernelSim(t)
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	p := foreignPort(t, sim, fs, "300", tcp4421)
	if err := sim.symlink(fs.subsystemDir(e.NQN), p+"/subsystems/legacy-link"); err != nil {
		t.Fatal(err)
	}
	sim.mutations()
	mustApply(t, fs, e)
	want := []string{"unlink ports/300/subsystems/legacy-link", "rmdir ports/300"}
	if diff := cmp.Diff(want, sim.mutations()); diff != "" {
		t.Errorf("operations (-want +got):\n%s", diff)
	}
	checkReadBack(t, fs, e)
}
