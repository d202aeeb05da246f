//go:build kernel

package kerneltest

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/pillar-csi/pillar-csi/configfs"
)

// The tests in this file start from trees another nvmet tool left behind,
// made with plain syscalls, and prove that Apply, Remove and Read keep the
// package's promises on them: Apply converges from any starting state,
// validation rejects what the kernel would misread, and Read reports every
// object the kernel has.

// foreignPort makes ports/<name> with addr, as another tool would.
func foreignPort(t testing.TB, name string, addr configfs.Address) string {
	t.Helper()
	dir := nvmetDir + "/ports/" + name
	mkdir(t, dir)
	writeAttr(t, dir+"/addr_trtype", addr.TrType)
	writeAttr(t, dir+"/addr_adrfam", addr.AdrFam)
	writeAttr(t, dir+"/addr_traddr", addr.TrAddr)
	writeAttr(t, dir+"/addr_trsvcid", addr.TrSvcID)
	return dir
}

// foreignSubsystem makes a subsystem open to any host, as another tool
// would, and returns its directory.
func foreignSubsystem(t testing.TB, nqn string) string {
	t.Helper()
	dir := nvmetDir + "/subsystems/" + nqn
	mkdir(t, dir)
	writeAttr(t, dir+"/attr_allow_any_host", "1")
	return dir
}

// portsOf returns the IDs of the ports the state links nqn to.
func portsOf(st *configfs.State, nqn string) []uint16 {
	var out []uint16
	for _, p := range st.Ports {
		if slices.Contains(p.Subsystems, nqn) {
			out = append(out, p.ID)
		}
	}
	return out
}

// A port with ID 0 is legal for nvmet. When another tool made one on the
// wanted address and enabled it, Apply must share it: a second port on the
// same address cannot be enabled (EADDRINUSE).
func TestApplyReusesForeignPortZero(t *testing.T) {
	fs, ctx := start(t)
	addr := loopback(freePort())
	other := foreignSubsystem(t, subsysNQN(t, 9))
	p0 := foreignPort(t, "0", addr)
	symlink(t, other, p0+"/subsystems/"+subsysNQN(t, 9))

	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 16), addr, host)
	mustApply(t, fs, ctx, e)
	st := mustRead(t, fs, ctx)
	if len(st.Ports) != 1 || st.Ports[0].ID != 0 {
		t.Fatalf("ports after Apply: %+v, want only the foreign port 0", st.Ports)
	}
	checkReadBack(t, fs, ctx, e)
	c := mustConnect(t, addr, e.NQN, host)
	c.disconnect()

	// Remove keeps port 0: the other tool's subsystem is still on it.
	mustRemove(t, fs, ctx, e.NQN)
	st = mustRead(t, fs, ctx)
	if len(st.Ports) != 1 || st.Ports[0].ID != 0 || len(st.Ports[0].Subsystems) != 1 {
		t.Errorf("ports after Remove: %+v, want port 0 with the other subsystem", st.Ports)
	}
}

// Two ports on the wanted address: a disabled one another tool left
// behind, first in name order, and an enabled one with a subsystem linked.
// Only the enabled one can take another link (linking the disabled one
// would enable it on an address in use, EADDRINUSE), so Apply must pick it.
func TestApplyPrefersTheEnabledPortOfAnAddress(t *testing.T) {
	fs, ctx := start(t)
	addr := loopback(freePort())
	foreignPort(t, "100", addr) // disabled: nothing linked
	other := foreignSubsystem(t, subsysNQN(t, 9))
	enabled := foreignPort(t, "200", addr)
	symlink(t, other, enabled+"/subsystems/"+subsysNQN(t, 9))

	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 16), addr, host)
	mustApply(t, fs, ctx, e)
	st := mustRead(t, fs, ctx)
	if got := portsOf(st, e.NQN); !slices.Equal(got, []uint16{200}) {
		t.Fatalf("subsystem linked to ports %v, want [200] (the enabled one); ports: %+v", got, st.Ports)
	}
	checkReadBack(t, fs, ctx, e)
	c := mustConnect(t, addr, e.NQN, host)
	c.disconnect()
	// Re-applying leaves it there.
	mustApply(t, fs, ctx, e)
	if got := portsOf(mustRead(t, fs, ctx), e.NQN); !slices.Equal(got, []uint16{200}) {
		t.Errorf("after re-Apply: linked to ports %v, want [200]", got)
	}
}

// A link of the subsystem to a port the export does not list, named other
// than the subsystem's NQN by another tool, must go: otherwise initiators
// can still connect on an address the export no longer has.
func TestApplyRemovesUnlistedPortLinkUnderAnotherName(t *testing.T) {
	fs, ctx := start(t)
	listed, unlisted := loopback(freePort()), loopback(freePort())
	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 16), listed, host)
	mustApply(t, fs, ctx, e)

	p := foreignPort(t, "300", unlisted)
	symlink(t, nvmetDir+"/subsystems/"+e.NQN, p+"/subsystems/legacy-link")
	// The kernel rule Apply relies on to read one link per port in the
	// usual case: one subsystem is linked at most once per port.
	wantErrno(t, "a second link to the subsystem on one port",
		unix.Symlink(nvmetDir+"/subsystems/"+e.NQN, p+"/subsystems/"+e.NQN), unix.EEXIST)
	c := mustConnect(t, unlisted, e.NQN, host) // the link really works
	c.disconnect()

	mustApply(t, fs, ctx, e)
	checkReadBack(t, fs, ctx, e)
	if _, err := os.Lstat(p + "/subsystems/legacy-link"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("link to the unlisted port still there after Apply (lstat: %v)", err)
	}
	if c, err := connect(unlisted, e.NQN, host); err == nil {
		c.disconnect()
		t.Errorf("initiator still connects on the unlisted address %s", unlisted)
	}
	// The port is left with nothing and removed, as for ports Apply made.
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unused port 300 left behind (stat: %v)", err)
	}
}

// nvmet-tcp parses addr_trsvcid with base 0 (kstrtou16 in
// inet_pton_with_scope): "06123" listens on 3155 and "09123" fails at link
// time. Both must be refused before anything is written.
func TestApplyRejectsServiceIDWithLeadingZero(t *testing.T) {
	fs, ctx := start(t)
	dev := newLoop(t, 16)

	// The kernel rule, with plain syscalls.
	rule := foreignSubsystem(t, subsysNQN(t, 9))
	p := foreignPort(t, "1", loopback("06123"))
	symlink(t, rule, p+"/subsystems/rule")
	if !listening(t, 3155) {
		t.Errorf("trsvcid 06123: nothing listens on 3155 (octal 06123)")
	}
	p2 := foreignPort(t, "2", loopback("09123"))
	wantErrno(t, "link to a port on trsvcid 09123", unix.Symlink(rule, p2+"/subsystems/rule"), unix.EINVAL)
	wipe(t)

	for i, svc := range []string{"06123", "09123"} {
		addr := loopback(svc)
		e := simpleExport(subsysNQN(t, i+1), dev, addr)
		err := fs.Apply(ctx, e)
		if !errors.Is(err, configfs.ErrInvalid) {
			t.Errorf("Apply with TrSvcID %q = %v, want a validation error (ErrInvalid)", svc, err)
		}
		if left := treeObjects(t); len(left) > 0 {
			t.Errorf("Apply with TrSvcID %q wrote %v", svc, left)
			wipe(t)
		}
	}
}

// An IPv6 socket on an IPv4-mapped address is bound to that IPv4 address:
// tcp ipv6 ::ffff:127.0.0.1 and tcp ipv4 127.0.0.1 on the same service ID
// are one listener. Exports on either form share one port, and one export
// cannot list both.
func TestIPv4MappedIPv6IsTheIPv4Listener(t *testing.T) {
	fs, ctx := start(t)
	v4 := loopback(freePort())
	mapped := configfs.Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "::ffff:127.0.0.1", TrSvcID: v4.TrSvcID}
	host := hostNQN()

	// The kernel rule, with plain syscalls.
	rule := foreignSubsystem(t, subsysNQN(t, 9))
	symlink(t, rule, foreignPort(t, "1", v4)+"/subsystems/rule")
	wantErrno(t, "enabling a port on "+mapped.String()+" next to "+v4.String(),
		unix.Symlink(rule, foreignPort(t, "2", mapped)+"/subsystems/rule"), unix.EADDRINUSE)
	wipe(t)

	a := simpleExport(subsysNQN(t, 1), newLoop(t, 16), v4, host)
	b := simpleExport(subsysNQN(t, 2), newLoop(t, 16), mapped, host)
	mustApply(t, fs, ctx, a)
	mustApply(t, fs, ctx, b)
	st := mustRead(t, fs, ctx)
	if len(st.Ports) != 1 || len(st.Ports[0].Subsystems) != 2 {
		t.Fatalf("ports: %+v, want one port with both subsystems", st.Ports)
	}
	checkReadBack(t, fs, ctx, a)
	checkReadBack(t, fs, ctx, b)
	for _, e := range []configfs.Export{a, b} {
		c := mustConnect(t, v4, e.NQN, host)
		c.disconnect()
	}

	// Another tool's enabled port on the mapped form is shared by an
	// export on the IPv4 form.
	v4b := loopback(freePort())
	mappedB := configfs.Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "::ffff:127.0.0.1", TrSvcID: v4b.TrSvcID}
	rule = foreignSubsystem(t, subsysNQN(t, 9))
	symlink(t, rule, foreignPort(t, "3", mappedB)+"/subsystems/rule")
	c := simpleExport(subsysNQN(t, 4), newLoop(t, 16), v4b, host)
	mustApply(t, fs, ctx, c)
	if got := portsOf(mustRead(t, fs, ctx), c.NQN); !slices.Equal(got, []uint16{3}) {
		t.Errorf("export on %s linked to ports %v, want [3] (the foreign port on %s)", v4b, got, mappedB)
	}
	checkReadBack(t, fs, ctx, c)

	both := simpleExport(subsysNQN(t, 3), newLoop(t, 16), v4, host)
	both.Ports = append(both.Ports, mapped)
	if err := fs.Apply(ctx, both); !errors.Is(err, configfs.ErrInvalid) {
		t.Errorf("Apply listing %s and %s = %v, want a validation error", v4, mapped, err)
	}
	if _, err := os.Stat(nvmetDir + "/subsystems/" + both.NQN); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rejected export's subsystem was created (stat: %v)", err)
	}
}

// nvmet parses port, namespace and ANA group directory names with base 0
// (kstrtou16/kstrtou32), so another tool may name them 0x10 or 010. Read
// must report them by the ID the kernel uses, Apply must see such a port on
// the wanted address and such a namespace, and Remove must unlink the
// subsystem from it.
func TestNonDecimalNamesAreSeen(t *testing.T) {
	fs, ctx := start(t)
	addr := loopback(freePort())
	dev, dev2 := newLoop(t, 16), newLoop(t, 16)

	// Another tool's subsystem on port 0x10 (ID 16), with namespace 010
	// (NSID 8) and ANA group 0x2 (ID 2).
	otherNQN := subsysNQN(t, 9)
	other := foreignSubsystem(t, otherNQN)
	mkdir(t, other+"/namespaces/010")
	writeAttr(t, other+"/namespaces/010/device_path", dev2)
	writeAttr(t, other+"/namespaces/010/enable", "1")
	p := foreignPort(t, "0x10", addr)
	mkdir(t, p+"/ana_groups/0x2")
	symlink(t, other, p+"/subsystems/"+otherNQN)

	st := mustRead(t, fs, ctx)
	if len(st.Ports) != 1 {
		t.Fatalf("Read reports ports %+v, want port 0x10 as ID 16", st.Ports)
	}
	port := st.Ports[0]
	if port.ID != 16 || port.Address != addr || !slices.Equal(port.Subsystems, []string{otherNQN}) {
		t.Errorf("port 0x10 read as %+v", port)
	}
	if diff := cmp.Diff([]configfs.ANAGroup{{ID: 1, State: "optimized"}, {ID: 2, State: "inaccessible"}}, port.ANAGroups); diff != "" {
		t.Errorf("ANA groups of port 0x10 (-want +got):\n%s", diff)
	}
	sub, ok := st.Subsystem(otherNQN)
	if !ok || len(sub.Namespaces) != 1 || sub.Namespaces[0].NSID != 8 || sub.Namespaces[0].DevicePath != dev2 || !sub.Namespaces[0].Enabled {
		t.Errorf("subsystem with namespace 010 read as %+v", sub)
	}

	// Apply must share port 0x10: a second port on its address cannot be
	// enabled.
	host := hostNQN()
	e := simpleExport(subsysNQN(t, 1), dev, addr, host)
	mustApply(t, fs, ctx, e)
	st = mustRead(t, fs, ctx)
	if got := portsOf(st, e.NQN); len(st.Ports) != 1 || !slices.Equal(got, []uint16{16}) {
		t.Fatalf("after Apply: linked to ports %v, ports %+v; want port 0x10 shared", got, st.Ports)
	}
	checkReadBack(t, fs, ctx, e)
	c := mustConnect(t, addr, e.NQN, host)
	c.disconnect()

	// A namespace directory 0x1 of our subsystem is NSID 1: Apply
	// converges it instead of making a second NSID 1 (whose enable the
	// kernel refuses) and removes the unlisted 0x5.
	mustRemove(t, fs, ctx, e.NQN)
	ours := foreignSubsystem(t, e.NQN)
	writeAttr(t, ours+"/attr_allow_any_host", "0")
	mkdir(t, ours+"/namespaces/0x1")
	writeAttr(t, ours+"/namespaces/0x1/device_path", dev)
	writeAttr(t, ours+"/namespaces/0x1/device_uuid", e.Namespaces[0].DeviceUUID)
	writeAttr(t, ours+"/namespaces/0x1/enable", "1")
	mkdir(t, ours+"/namespaces/0x5")
	symlink(t, ours, p+"/subsystems/"+e.NQN)
	mustApply(t, fs, ctx, e)
	ents, err := os.ReadDir(ours + "/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	if !slices.Equal(names, []string{"0x1"}) {
		t.Errorf("namespaces after Apply: %v, want [0x1] converged in place", names)
	}
	checkReadBack(t, fs, ctx, e)

	// Remove finds the link on port 0x10 and keeps the port, which the
	// other subsystem still uses.
	mustRemove(t, fs, ctx, e.NQN)
	st = mustRead(t, fs, ctx)
	if _, ok := st.Subsystem(e.NQN); ok || len(st.Ports) != 1 || !slices.Equal(st.Ports[0].Subsystems, []string{otherNQN}) {
		t.Errorf("after Remove: %+v", st)
	}
}

// listening reports whether a TCP socket listens on 127.0.0.1:port
// (/proc/net/tcp: local address in hex, state 0A is LISTEN).
func listening(t testing.TB, port int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("0100007F:%04X", port)
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 3 && f[1] == want && f[3] == "0A" {
			return true
		}
	}
	return false
}
