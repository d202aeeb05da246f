//go:build kernel

package kerneltest

import (
	"context"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pillar-csi/pillar-csi/configfs"
)

func mustApply(t testing.TB, fs *configfs.FS, ctx context.Context, e configfs.Export) {
	t.Helper()
	if err := fs.Apply(ctx, e); err != nil {
		t.Fatalf("Apply(%s): %v", e.NQN, err)
	}
}

func mustRemove(t testing.TB, fs *configfs.FS, ctx context.Context, nqn string) {
	t.Helper()
	if err := fs.Remove(ctx, nqn); err != nil {
		t.Fatalf("Remove(%s): %v", nqn, err)
	}
}

func mustRead(t testing.TB, fs *configfs.FS, ctx context.Context) *configfs.State {
	t.Helper()
	st, err := fs.Read(ctx)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return st
}

// checkReadBack fails unless the kernel tree reads back as exactly e.
func checkReadBack(t testing.TB, fs *configfs.FS, ctx context.Context, e configfs.Export) {
	t.Helper()
	want, err := e.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := mustRead(t, fs, ctx).Export(e.NQN)
	if !ok {
		t.Fatalf("subsystem %s not in the kernel tree", e.NQN)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("read-back differs from the applied export (-applied +kernel):\n%s", diff)
	}
	one, ok, err := fs.ReadExport(ctx, e.NQN)
	if err != nil || !ok {
		t.Fatalf("ReadExport(%s) = %v, %v", e.NQN, ok, err)
	}
	if diff := cmp.Diff(want, one); diff != "" {
		t.Errorf("ReadExport differs from the applied export (-applied +kernel):\n%s", diff)
	}
}

func checkEmpty(t testing.TB) {
	t.Helper()
	if left := treeObjects(t); len(left) > 0 {
		t.Errorf("objects left in the nvmet tree: %v", left)
	}
}

// An export from nothing: the initiator connects, sees the namespace and
// reads back what it wrote; Remove leaves nothing behind.
func TestExportFromScratch(t *testing.T) {
	fs, ctx := start(t)
	dev := newLoop(t, 64)
	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), dev, loopback(freePort()), host)
	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)

	st := mustRead(t, fs, ctx)
	if len(st.Ports) != 1 || st.Ports[0].ID != configfs.PreferredPortID(e.Ports[0]) {
		t.Errorf("ports = %+v, want one with ID %d", st.Ports, configfs.PreferredPortID(e.Ports[0]))
	}
	c := mustConnect(t, e.Ports[0], e.NQN, host)
	if state := c.attr("state"); state != "live" {
		t.Fatalf("controller state %q", state)
	}
	bio := openBlockIO(t, blockDevice(t, e.Namespaces[0].DeviceUUID))
	for i := int64(0); i < 8; i++ {
		if err := bio.roundTrip(i, i); err != nil {
			t.Fatal(err)
		}
	}
	c.disconnect()
	mustRemove(t, fs, ctx, e.NQN)
	checkEmpty(t)
}

// A second and a third subsystem on the same address share the first one's
// port; each is reachable; removing them one by one keeps the port until
// the last is gone.
func TestSecondAndThirdSubsystemShareThePort(t *testing.T) {
	fs, ctx := start(t)
	addr := loopback(freePort())
	host := hostNQN()
	var es []configfs.Export
	for i := 1; i <= 3; i++ {
		e := simpleExport(subsysNQN(t, i), newLoop(t, 16), addr, host)
		mustApply(t, fs, ctx, e)
		es = append(es, e)
	}
	st := mustRead(t, fs, ctx)
	if len(st.Ports) != 1 {
		t.Fatalf("got %d ports, want 1: %+v", len(st.Ports), st.Ports)
	}
	if diff := cmp.Diff([]string{es[0].NQN, es[1].NQN, es[2].NQN}, st.Ports[0].Subsystems); diff != "" {
		t.Errorf("port links (-want +got):\n%s", diff)
	}
	for _, e := range es {
		checkReadBack(t, fs, ctx, e)
		c := mustConnect(t, addr, e.NQN, host)
		bio := openBlockIO(t, blockDevice(t, e.Namespaces[0].DeviceUUID))
		if err := bio.roundTrip(1, 42); err != nil {
			t.Fatalf("%s: %v", e.NQN, err)
		}
		c.disconnect()
	}
	for i, e := range es {
		mustRemove(t, fs, ctx, e.NQN)
		st := mustRead(t, fs, ctx)
		if want := min(1, 2-i); len(st.Ports) != want {
			t.Errorf("after removing %d exports: %d ports, want %d", i+1, len(st.Ports), want)
		}
		if want := min(1, 2-i); len(st.Hosts) != want {
			t.Errorf("after removing %d exports: %d hosts, want %d", i+1, len(st.Hosts), want)
		}
	}
	checkEmpty(t)
}

// Re-applying an identical export writes nothing, so a connected initiator
// keeps its controller and its I/O never fails.
func TestIdenticalReApplyLeavesIOUndisturbed(t *testing.T) {
	fs, ctx := start(t)
	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 64), loopback(freePort()), host)
	e.Attrs.Serial, e.Attrs.Model, e.Attrs.Version = "reapply1", "pillar-csi", "1.3"
	mustApply(t, fs, ctx, e)
	c := mustConnect(t, e.Ports[0], e.NQN, host)
	cntlid := c.attr("cntlid")
	load := startIO(openBlockIO(t, blockDevice(t, e.Namespaces[0].DeviceUUID)))

	// After the initiator identified the controller the kernel refuses
	// any write of attr_serial, attr_model or attr_version, even of the
	// same value: an Apply that rewrote them would fail here.
	before := load.ops.Load()
	for i := 0; i < 20; i++ {
		if err := fs.Apply(ctx, e); err != nil {
			load.finish()
			t.Fatalf("re-Apply %d: %v", i, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	ops, err := load.finish()
	if err != nil {
		t.Fatalf("I/O failed during re-Apply: %v", err)
	}
	if ops <= before {
		t.Errorf("no I/O completed during re-Apply (%d before, %d after)", before, ops)
	}
	if got := c.attr("cntlid"); got != cntlid || c.attr("state") != "live" {
		t.Errorf("controller changed: cntlid %s -> %s, state %s", cntlid, got, c.attr("state"))
	}
	checkReadBack(t, fs, ctx, e)
	t.Logf("%d I/O round trips completed while 20 identical Applies ran", ops)
}

// Changing the access list of a live export: a newly allowed host can
// connect; a host taken off the list loses the controller it has (nvmet
// checks the list only at connect, so Apply drops and makes again the
// subsystem's port link, which tears its controllers down) and cannot
// connect again; a host that stays listed reconnects by itself, and I/O
// through the namespace goes on.
func TestChangeAllowedHostsLive(t *testing.T) {
	fs, ctx := start(t)
	hostA, hostB, hostC := hostNQN(), hostNQN(), hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 64), loopback(freePort()), hostA, hostB)
	mustApply(t, fs, ctx, e)
	if _, err := connect(e.Ports[0], e.NQN, hostC); err == nil {
		t.Fatal("a host not on the list connected")
	}
	cA := mustConnect(t, e.Ports[0], e.NQN, hostA)
	cB := mustConnect(t, e.Ports[0], e.NQN, hostB)
	io := openBlockIO(t, blockDevice(t, e.Namespaces[0].DeviceUUID))
	load := startIO(io)
	time.Sleep(200 * time.Millisecond)
	cntlidA, cntlidB := cA.attr("cntlid"), cB.attr("cntlid")
	before := load.ops.Load()

	e.AllowedHosts = []string{hostB, hostC}
	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)
	// The initiators were connected with reconnect_delay=1 and
	// ctrl_loss_tmo=2: the unlisted host's reconnects are refused until
	// its controller is given up and deleted; the listed one's succeed.
	// A listed host's initiator spends reconnect_delay connecting, so a
	// poll every 50 ms sees it leave live.
	waitState(t, cB, "connecting", 15*time.Second)
	waitState(t, cB, "live", 15*time.Second)
	waitState(t, cA, "", 15*time.Second)
	// New connections only now: all three hosts share this kernel, which
	// refuses a controller whose cntlid another controller of the
	// subsystem still has (EINVAL), and nvmet hands out the freed ones.
	if _, err := connect(e.Ports[0], e.NQN, hostA); err == nil {
		t.Error("a host removed from the list could open a new connection")
	}
	mustConnect(t, e.Ports[0], e.NQN, hostC)
	ops, err := load.finish()
	if err != nil || ops <= before {
		t.Errorf("I/O through the namespace across the change: %d round trips before it, %d in all, %v", before, ops, err)
	}
	if err := io.roundTrip(0, 7); err != nil {
		t.Errorf("I/O after the change: %v", err)
	}
	t.Logf("cntlid of host A %s, of host B %s before the change and %s after; %d I/O round trips before the change, %d in all",
		cntlidA, cntlidB, cB.attr("cntlid"), before, ops)
	var hosts []string
	for _, h := range mustRead(t, fs, ctx).Hosts {
		hosts = append(hosts, h.NQN)
	}
	slices.Sort(hosts)
	if want := []string{hostB, hostC}; !slices.Equal(hosts, slices.Sorted(slices.Values(want))) {
		t.Errorf("host entries %v, want %v", hosts, want)
	}
}

// waitState waits until the controller's state is want; "" means the
// controller is gone (the initiator deleted it).
func waitState(t testing.TB, c *controller, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for c.attr("state") != want {
		if time.Now().After(deadline) {
			t.Errorf("controller %s is %q after %v, want %q", c.name, c.attr("state"), timeout, want)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Switching the ACL off (any host) and on again on a live export: a host
// that connected while any host could loses its controller when the list
// comes back without it.
func TestACLOffAndOn(t *testing.T) {
	fs, ctx := start(t)
	hostA, hostB := hostNQN(), hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 64), loopback(freePort()), hostA)
	mustApply(t, fs, ctx, e)
	if _, err := connect(e.Ports[0], e.NQN, hostB); err == nil {
		t.Fatal("ACL on: an unlisted host connected")
	}

	e.Attrs.AllowAnyHost, e.AllowedHosts = true, nil
	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)
	if st := mustRead(t, fs, ctx); len(st.Hosts) != 0 {
		t.Errorf("ACL off left host entries: %+v", st.Hosts)
	}
	cB := mustConnect(t, e.Ports[0], e.NQN, hostB)

	e.Attrs.AllowAnyHost, e.AllowedHosts = false, []string{hostA}
	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)
	// hostB, connected while any host could, is not on the list: its
	// controller is torn down and its reconnects are refused.
	waitState(t, cB, "", 15*time.Second)
	if _, err := connect(e.Ports[0], e.NQN, hostB); err == nil {
		t.Error("ACL on again: an unlisted host opened a new connection")
	}
	mustConnect(t, e.Ports[0], e.NQN, hostA)
}

// Remove while an initiator is connected and doing I/O: Remove succeeds,
// the tree is empty, the initiator loses the subsystem.
func TestRemoveWhileConnected(t *testing.T) {
	fs, ctx := start(t)
	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 64), loopback(freePort()), host)
	mustApply(t, fs, ctx, e)
	c := mustConnect(t, e.Ports[0], e.NQN, host)
	load := startIO(openBlockIO(t, blockDevice(t, e.Namespaces[0].DeviceUUID)))
	time.Sleep(100 * time.Millisecond)

	mustRemove(t, fs, ctx, e.NQN)
	checkEmpty(t)
	// The I/O loop may have failed (the namespace went away under it) or
	// been stopped between two round trips; either is fine. What matters
	// is that it ran, and that the initiator lost the subsystem.
	if ops, _ := load.finish(); ops == 0 {
		t.Error("no I/O ran before Remove")
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.attr("state") == "live" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if s := c.attr("state"); s == "live" {
		t.Errorf("controller still live after Remove")
	}
	mustRemove(t, fs, ctx, e.NQN) // idempotent
}

// Remove with allowed hosts linked: the links and host entries go, a host
// another subsystem still lists stays.
func TestRemoveWithAllowedHostsLinked(t *testing.T) {
	fs, ctx := start(t)
	hostA, hostB, shared := hostNQN(), hostNQN(), hostNQN()
	addr := loopback(freePort())
	a := simpleExport(subsysNQN(t, 1), newLoop(t, 16), addr, hostA, hostB, shared)
	b := simpleExport(subsysNQN(t, 2), newLoop(t, 16), addr, shared)
	mustApply(t, fs, ctx, a)
	mustApply(t, fs, ctx, b)
	mustRemove(t, fs, ctx, a.NQN)
	st := mustRead(t, fs, ctx)
	if len(st.Hosts) != 1 || st.Hosts[0].NQN != shared {
		t.Errorf("hosts after Remove: %+v, want only the shared one", st.Hosts)
	}
	checkReadBack(t, fs, ctx, b)
	mustConnect(t, addr, b.NQN, shared)
	mustRemove(t, fs, ctx, b.NQN)
	checkEmpty(t)
}

// Apply after a partial failure converges: a namespace whose device is
// missing stops Apply at enable; a port that cannot bind stops it at the
// link and leaves no port behind. The next Apply with the cause fixed
// completes.
func TestApplyAfterPartialFailure(t *testing.T) {
	fs, ctx := start(t)
	host := hostNQN()
	dev := newLoop(t, 64)
	e := simpleExport(subsysNQN(t, 1), dev, loopback(freePort()), host)

	e.Namespaces[0].DevicePath = "/dev/does-not-exist"
	err := fs.Apply(ctx, e)
	if !configfs.IsNotExist(err) {
		t.Fatalf("Apply with a missing device = %v, want ENOENT from enable", err)
	}
	sub, ok, rerr := fs.ReadSubsystem(ctx, e.NQN)
	if rerr != nil || !ok || len(sub.Namespaces) != 1 || sub.Namespaces[0].Enabled {
		t.Fatalf("after the failure: %+v %v %v", sub, ok, rerr)
	}

	e.Namespaces[0].DevicePath = dev
	good := e.Ports
	e.Ports = []configfs.Address{{TrType: "tcp", AdrFam: "ipv4", TrAddr: "192.0.2.1", TrSvcID: good[0].TrSvcID}}
	err = fs.Apply(ctx, e)
	if !isErrno(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("Apply on an address the guest does not have = %v, want EADDRNOTAVAIL", err)
	}
	if st := mustRead(t, fs, ctx); len(st.Ports) != 0 {
		t.Errorf("a port that could not bind was left behind: %+v", st.Ports)
	}

	e.Ports = good
	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)
	mustConnect(t, e.Ports[0], e.NQN, host)
}

// Everything Apply can set reads back as it was applied: all subsystem
// attributes, several namespaces with UUID, NGUID, ANA group and
// buffered_io, an IPv4 and an IPv6 port, several hosts.
func TestReadBackEqualsApplied(t *testing.T) {
	fs, ctx := start(t)
	file, err := os.CreateTemp(scratchDir, "configfs-file-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(file.Name()) })
	file.Truncate(16 << 20)
	file.Close()

	port := freePort()
	e := configfs.Export{
		NQN: subsysNQN(t, 1),
		Attrs: configfs.SubsystemAttrs{
			Version: "2.0.1", Serial: "PILLAR-0001", Model: "pillar-csi zvol",
			CntlIDMin: 10, CntlIDMax: 200, QIDMax: 4, PIEnable: false,
		},
		Namespaces: []configfs.Namespace{
			{NSID: 1, DevicePath: newLoop(t, 16), DeviceUUID: newUUID(), DeviceNGUID: randomHex(16), ANAGroupID: 1, Enabled: true},
			{NSID: 5, DevicePath: newLoop(t, 16), DeviceUUID: newUUID(), ANAGroupID: 3, Enabled: false},
			// A regular file on tmpfs needs buffered_io: nvmet opens
			// files with O_DIRECT unless told otherwise.
			{NSID: 9, DevicePath: file.Name(), DeviceUUID: newUUID(), ANAGroupID: 1, BufferedIO: true, Enabled: true},
		},
		Ports: []configfs.Address{
			loopback(port),
			{TrType: "tcp", AdrFam: "ipv6", TrAddr: "::1", TrSvcID: port},
		},
		AllowedHosts: []string{hostNQN(), hostNQN(), hostNQN()},
	}
	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)

	// The same export, spelled differently (upper-case IDs, long IPv6
	// form, other order), is already true: nothing to do.
	e2 := e
	e2.Namespaces = slices.Clone(e.Namespaces)
	slices.Reverse(e2.Namespaces)
	e2.Ports = []configfs.Address{{TrType: "tcp", AdrFam: "ipv6", TrAddr: "0:0:0:0:0:0:0:1", TrSvcID: port}, loopback(port)}
	mustApply(t, fs, ctx, e2)
	checkReadBack(t, fs, ctx, e)
}

// Changing a namespace's device on a live export disables it for the
// writes and enables it again; changing the ANA group needs no disable.
func TestChangeNamespaceDevice(t *testing.T) {
	fs, ctx := start(t)
	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 16), loopback(freePort()), host)
	mustApply(t, fs, ctx, e)
	e.Namespaces[0].DevicePath = newLoop(t, 32)
	e.Namespaces[0].ANAGroupID = 2
	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)
	e.Namespaces[0].ANAGroupID = 1
	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)
}

// Concurrent Apply and Remove of different subsystems sharing one port and
// one host, from several goroutines.
func TestConcurrentApplyRemove(t *testing.T) {
	fs, ctx := start(t)
	addr := loopback(freePort())
	host := hostNQN()
	dev := newLoop(t, 16)
	const n = 8
	exports := make([]configfs.Export, n)
	for i := range exports {
		exports[i] = simpleExport(subsysNQN(t, i), dev, addr, host)
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
		st := mustRead(t, fs, ctx)
		if len(st.Subsystems) != n/2 || len(st.Ports) != 1 || len(st.Ports[0].Subsystems) != n/2 || len(st.Hosts) != 1 {
			t.Fatalf("round %d: %d subsystems, ports %+v, hosts %+v", round, len(st.Subsystems), st.Ports, st.Hosts)
		}
	}
	for i := 1; i < n; i += 2 {
		checkReadBack(t, fs, ctx, exports[i])
		mustRemove(t, fs, ctx, exports[i].NQN)
	}
	checkEmpty(t)
}

// Read picks up objects another tool made, under names Apply would not
// use, and Remove still cleans them up.
func TestReadAndRemoveForeignObjects(t *testing.T) {
	fs, ctx := start(t)
	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 16), loopback(freePort()), host)
	mustApply(t, fs, ctx, e)

	// Another tool's port 7 on ::1, linking our subsystem as "other".
	p7 := nvmetDir + "/ports/7"
	mkdir(t, p7)
	writeAttr(t, p7+"/addr_trtype", "tcp")
	writeAttr(t, p7+"/addr_adrfam", "ipv6")
	writeAttr(t, p7+"/addr_traddr", "::1")
	writeAttr(t, p7+"/addr_trsvcid", e.Ports[0].TrSvcID)
	symlink(t, nvmetDir+"/subsystems/"+e.NQN, p7+"/subsystems/other")
	mkdir(t, p7+"/referrals/peer")
	mkdir(t, p7+"/ana_groups/2")

	st := mustRead(t, fs, ctx)
	if len(st.Ports) != 2 {
		t.Fatalf("ports: %+v", st.Ports)
	}
	var p configfs.Port
	for _, q := range st.Ports {
		if q.ID == 7 {
			p = q
		}
	}
	want := configfs.Port{
		ID:             7,
		Address:        configfs.Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "::1", TrSvcID: e.Ports[0].TrSvcID},
		TReq:           "not specified",
		InlineDataSize: p.InlineDataSize, // chosen by nvmet-tcp at enable
		Subsystems:     []string{e.NQN},
		Referrals:      []configfs.Referral{{Name: "peer", TReq: "not specified"}},
		ANAGroups:      []configfs.ANAGroup{{ID: 1, State: "optimized"}, {ID: 2, State: "inaccessible"}},
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("foreign port (-want +got):\n%s", diff)
	}
	if p.InlineDataSize <= 0 {
		t.Errorf("inline data size %d: nvmet-tcp sets it when the port is enabled", p.InlineDataSize)
	}

	mustRemove(t, fs, ctx, e.NQN)
	st = mustRead(t, fs, ctx)
	// Port 7 has a referral and an ANA group of its own: still in use.
	if len(st.Subsystems) != 0 || len(st.Hosts) != 0 || len(st.Ports) != 1 || st.Ports[0].ID != 7 || len(st.Ports[0].Subsystems) != 0 {
		t.Errorf("after Remove: %+v", st)
	}
}
