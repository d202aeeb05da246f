package configfs

import (
	"bufio"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// loadTree materializes a fixture tree file from testdata (format in
// testdata/basic.tree) under a temporary directory and returns it. Fixture
// trees are text because configfs names (NQNs with ':') and symlinks cannot
// live in a Go module zip.
func loadTree(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root := t.TempDir()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		kind, rest, _ := strings.Cut(text, " ")
		fields, err := quotedFields(rest)
		if err != nil {
			t.Fatalf("%s:%d: %v", name, line, err)
		}
		switch {
		case kind == "d" && len(fields) == 1:
			err = os.MkdirAll(filepath.Join(root, fields[0]), 0o755)
		case kind == "f" && len(fields) == 2:
			err = os.WriteFile(filepath.Join(root, fields[0]), []byte(fields[1]), 0o644)
		case kind == "l" && len(fields) == 2:
			err = os.Symlink(fields[1], filepath.Join(root, fields[0]))
		default:
			t.Fatalf("%s:%d: cannot parse %q", name, line, text)
		}
		if err != nil {
			t.Fatalf("%s:%d: %v", name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return root
}

func quotedFields(s string) ([]string, error) {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return nil, err
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		s = s[len(q):]
	}
	return out, nil
}

const (
	fixtureHost = "nqn.2014-08.org.nvmexpress:uuid:5f3a6c1e-1111-4c2d-9e2f-000000000001"
	disk1       = "nqn.2014-08.org.example:disk1"
	oldKernel   = "nqn.2016-06.io.spdk:old-kernel"
)

func TestReadFixture(t *testing.T) {
	fs := NewFS(loadTree(t, "basic.tree"))
	got, err := fs.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := &State{
		Subsystems: []Subsystem{
			{
				NQN: disk1,
				Attrs: SubsystemAttrs{
					Version: "1.3", Serial: "9a1bd2e0c3f4a5b6", Model: "Linux",
					CntlIDMin: 1, CntlIDMax: 65519, QIDMax: 128,
				},
				Namespaces: []Namespace{
					{NSID: 1, DevicePath: "/dev/loop0", DeviceUUID: "b4a5c6d7-0000-4000-8000-00000000000a", ANAGroupID: 1, Enabled: true},
					{NSID: 2, DeviceNGUID: "0102030a-0b0c-0d0e-0f10-111213141516", ANAGroupID: 2, BufferedIO: true},
				},
				AllowedHosts: []string{fixtureHost},
			},
			{
				NQN:   oldKernel,
				Attrs: SubsystemAttrs{AllowAnyHost: true, Version: "1.3", Serial: "0000000000000001", Model: "Linux"},
			},
		},
		Ports: []Port{
			{
				ID:             1,
				Address:        Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "10.0.0.1", TrSvcID: "4420"},
				TReq:           "not specified",
				InlineDataSize: 16384,
				Subsystems:     []string{disk1, oldKernel},
				Referrals: []Referral{{
					Name:    "peer",
					Address: Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "10.0.0.2", TrSvcID: "4420"},
					PortID:  7, TReq: "not specified", Enabled: true,
				}},
				ANAGroups: []ANAGroup{{ID: 1, State: "optimized"}, {ID: 2, State: "inaccessible"}},
			},
			{
				ID:             2,
				Address:        Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "fd00:0:0::1", TrSvcID: "4420"},
				TReq:           "not specified",
				InlineDataSize: -1,
				Subsystems:     []string{disk1},
				ANAGroups:      []ANAGroup{{ID: 1, State: "optimized"}},
			},
		},
		Hosts: []Host{{NQN: fixtureHost, DHCHAPHash: "hmac(sha256)", DHCHAPDHGroup: "null"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}

	// The export view resolves ports by link target and canonicalizes the
	// IPv6 address another tool wrote in long form.
	e, ok := got.Export(disk1)
	if !ok {
		t.Fatal("no export for disk1")
	}
	wantPorts := []Address{
		{TrType: "tcp", AdrFam: "ipv4", TrAddr: "10.0.0.1", TrSvcID: "4420"},
		{TrType: "tcp", AdrFam: "ipv6", TrAddr: "fd00::1", TrSvcID: "4420"},
	}
	if diff := cmp.Diff(wantPorts, e.Ports); diff != "" {
		t.Errorf("Export ports (-want +got):\n%s", diff)
	}
	if _, ok := got.Export("nqn.2014-08.org.example:absent"); ok {
		t.Error("Export found a subsystem that does not exist")
	}

	sub, ok, err := fs.ReadSubsystem(context.Background(), oldKernel)
	if err != nil || !ok || cmp.Diff(want.Subsystems[1], sub) != "" {
		t.Errorf("ReadSubsystem = %+v, %v, %v", sub, ok, err)
	}
	if _, ok, err := fs.ReadSubsystem(context.Background(), "nqn.2014-08.org.example:absent"); ok || err != nil {
		t.Errorf("ReadSubsystem of a missing subsystem = %v, %v", ok, err)
	}

	// ReadExport reads one export without the other subsystems and
	// agrees with the view of the whole state.
	for _, sub := range want.Subsystems {
		one, ok, err := fs.ReadExport(context.Background(), sub.NQN)
		all, _ := got.Export(sub.NQN)
		if err != nil || !ok || cmp.Diff(all, one) != "" {
			t.Errorf("ReadExport(%s) = %v, %v; differs from State.Export (-state +ReadExport):\n%s", sub.NQN, ok, err, cmp.Diff(all, one))
		}
	}
	if _, ok, err := fs.ReadExport(context.Background(), "nqn.2014-08.org.example:absent"); ok || err != nil {
		t.Errorf("ReadExport of a missing subsystem = %v, %v", ok, err)
	}
}

// TestWithoutNvmet holds NewFS to its documentation: on a root without
// nvmet every call that touches the tree fails with IsNotExist.
func TestWithoutNvmet(t *testing.T) {
	// nvmet not loaded: configfs is mounted but has no nvmet directory.
	fs := NewFS(t.TempDir())
	ctx := context.Background()
	const nqn = "nqn.2014-08.org.example:vol"
	_, err := fs.Read(ctx)
	if !IsNotExist(err) {
		t.Errorf("Read = %v, want a not-exist error", err)
	}
	if _, ok, err := fs.ReadSubsystem(ctx, nqn); ok || !IsNotExist(err) {
		t.Errorf("ReadSubsystem = %v, %v; want a not-exist error", ok, err)
	}
	if _, ok, err := fs.ReadExport(ctx, nqn); ok || !IsNotExist(err) {
		t.Errorf("ReadExport = %v, %v; want a not-exist error", ok, err)
	}
	e := Export{NQN: nqn, Namespaces: []Namespace{{NSID: 1, DevicePath: "/dev/a"}}, Ports: []Address{tcp4420}}
	if err := fs.Apply(ctx, e); !IsNotExist(err) {
		t.Errorf("Apply = %v, want a not-exist error", err)
	}
	if err := fs.Remove(ctx, nqn); !IsNotExist(err) {
		t.Errorf("Remove = %v, want a not-exist error", err)
	}
}

func TestReadRejectsGarbageAttribute(t *testing.T) {
	root := loadTree(t, "basic.tree")
	p := filepath.Join(root, "nvmet/subsystems", disk1, "attr_cntlid_min")
	if err := os.WriteFile(p, []byte("many\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewFS(root).Read(context.Background())
	var ce *Error
	if err == nil || !errors.As(err, &ce) || ce.Op != "parse" || ce.Path != p {
		t.Fatalf("Read = %v, want a parse error naming %s", err, p)
	}
}

// TestReadKernelFixture reads a tree captured from a real 6.1 kernel (see
// the header of testdata/linux-6.1.tree).
func TestReadKernelFixture(t *testing.T) {
	const host = "nqn.2014-08.org.nvmexpress:uuid:5f3a6c1e-1111-4c2d-9e2f-000000000001"
	volA, volB := "nqn.2024-01.io.example:vol-a", "nqn.2024-01.io.example:vol-b"
	st, err := NewFS(loadTree(t, "linux-6.1.tree")).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defaults := func(serial string, anyHost bool) SubsystemAttrs {
		return SubsystemAttrs{AllowAnyHost: anyHost, Version: "1.3", Serial: serial, Model: "Linux",
			CntlIDMin: 1, CntlIDMax: 65519, QIDMax: 128}
	}
	v4 := Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "127.0.0.1", TrSvcID: "4420"}
	v6 := Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "::1", TrSvcID: "4420"}
	optimized := []ANAGroup{{ID: 1, State: "optimized"}}
	want := &State{
		Subsystems: []Subsystem{
			{
				NQN:   volA,
				Attrs: defaults("ecd153b78f613898d3bd", false),
				Namespaces: []Namespace{{NSID: 1, DevicePath: "/dev/loop0",
					DeviceUUID: "70bebe19-285a-49df-a120-3e18fc17c8c2", ANAGroupID: 1, Enabled: true}},
				AllowedHosts: []string{host},
			},
			{
				NQN:   volB,
				Attrs: defaults("7a6d40f53f18255f7fcc", true),
				Namespaces: []Namespace{
					{NSID: 1, DevicePath: "/dev/loop1", DeviceUUID: "9182e816-c3b0-47b1-9e68-1ba4109fd224", ANAGroupID: 1, Enabled: true},
					{NSID: 2, DeviceUUID: "0d480893-6c30-404b-8014-6844724809b2", ANAGroupID: 1},
				},
			},
		},
		Ports: []Port{
			{
				ID: 1, TReq: "not specified", InlineDataSize: -1,
				Referrals: []Referral{{Name: "peer", TReq: "not specified"}},
				ANAGroups: []ANAGroup{{ID: 1, State: "optimized"}, {ID: 2, State: "inaccessible"}},
			},
			{ID: PreferredPortID(v6), Address: v6, TReq: "not specified", InlineDataSize: 16384,
				Subsystems: []string{volB}, ANAGroups: optimized},
			{ID: PreferredPortID(v4), Address: v4, TReq: "not specified", InlineDataSize: 16384,
				Subsystems: []string{volA}, ANAGroups: optimized},
		},
		Hosts: []Host{{NQN: host}},
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
}

// TestLinked: every subsystem with the number of ports it is linked to; a
// subsystem whose port link another tool removed counts 0, one removed is
// absent.
func TestLinked(t *testing.T) {
	_, fs := newKernelSim(t)
	ctx := context.Background()
	a, b, c := fullExport(t, 1), fullExport(t, 2), fullExport(t, 3)
	c.Ports = nil
	for _, e := range []Export{a, b, c} {
		mustApply(t, fs, e)
	}
	got, err := fs.Linked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{a.NQN: 1, b.NQN: 1, c.NQN: 0}; !maps.Equal(got, want) {
		t.Fatalf("Linked = %v, want %v", got, want)
	}
	st := mustRead(t, fs)
	port := strconv.FormatUint(uint64(st.Ports[0].ID), 10)
	if err := os.Remove(filepath.Join(fs.Root(), "nvmet", "ports", port, "subsystems", a.NQN)); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(ctx, b.NQN); err != nil {
		t.Fatal(err)
	}
	got, err = fs.Linked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{a.NQN: 0, c.NQN: 0}; !maps.Equal(got, want) {
		t.Errorf("after unlinking %s and removing %s: Linked = %v, want %v", a.NQN, b.NQN, got, want)
	}
}
