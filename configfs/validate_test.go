package configfs

import (
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestValidateNQN(t *testing.T) {
	long := "nqn.2024-01.io.example:" + strings.Repeat("x", MaxNQNLen-len("nqn.2024-01.io.example:"))
	for _, nqn := range []string{
		"nqn.2014-08.org.nvmexpress:uuid:0f2c7a9e-3c33-4c59-a2e5-7d7f7b6b1a01",
		"nqn.2016-06.io.spdk:cnode1",
		"nqn.2024-01.io.pillar-csi:pvc-1234.vol_a",
		"nqn.2024-12.com.example",
		long,
	} {
		if err := ValidateNQN(nqn); err != nil {
			t.Errorf("ValidateNQN(%q) = %v, want nil", nqn, err)
		}
	}
	for _, nqn := range []string{
		"",
		long + "y",
		DiscoveryNQN,
		"iqn.2014-08.org.example:x",
		"nqn.14-08.org.example:x",
		"nqn.2014-13.org.example:x",
		"nqn.2014-00.org.example:x",
		"nqn.2014-08:x",
		"nqn.2014-08..example:x",
		"nqn.2014-08.org.exa_mple:x",
		"nqn.2014-08.org.example:",
		"nqn.2014-08.org.example:a/b",
		"nqn.2014-08.org.example:a b",
		"nqn.2014-08.org.example:a\x00b",
		"nqn.2014-08.org.example:a\nb",
		"nqn.2014-08.org.example:caf\u00e9",
		"nqn.2014-08.org.nvmexpress:uuid:not-a-uuid",
	} {
		err := ValidateNQN(nqn)
		if !IsInvalid(err) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateNQN(%q) = %v, want an ErrInvalid error", nqn, err)
		}
	}
}

func TestErrorMessageNamesFieldAndCause(t *testing.T) {
	err := ValidateNQN("nqn.2014-08.org.example:a/b")
	want := `configfs: validate "nqn.2014-08.org.example:a/b": invalid configuration: byte 25 ('/') is not printable ASCII other than space and '/'`
	if err == nil || err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
}

func TestNormalizeExport(t *testing.T) {
	e := Export{
		NQN:   "nqn.2024-01.io.pillar-csi:vol",
		Attrs: SubsystemAttrs{Version: "2.0.0", Serial: "abc"},
		Namespaces: []Namespace{
			{NSID: 2, DevicePath: "/dev/b", DeviceUUID: "6E7A1F0C-9D2B-4F7E-8A8B-000000000001"},
			{NSID: 1, DevicePath: "/dev/a", DeviceNGUID: "0102030405060708090a0b0c0d0e0f10", DeviceUUID: zeroUUID},
		},
		Ports: []Address{
			{TrType: "tcp", AdrFam: "ipv6", TrAddr: "FD00:0::1", TrSvcID: "4420"},
			{TrType: "tcp", AdrFam: "ipv4", TrAddr: "192.0.2.1", TrSvcID: "4420"},
			{TrType: "tcp", AdrFam: "ipv6", TrAddr: "::FFFF:192.0.2.1", TrSvcID: "4421"},
		},
		AllowedHosts: []string{hostB, hostA},
	}
	got, err := e.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	want := Export{
		NQN:   e.NQN,
		Attrs: SubsystemAttrs{Version: "2.0", Serial: "abc"},
		Namespaces: []Namespace{
			{NSID: 1, DevicePath: "/dev/a", DeviceNGUID: "01020304-0506-0708-090a-0b0c0d0e0f10"},
			{NSID: 2, DevicePath: "/dev/b", DeviceUUID: "6e7a1f0c-9d2b-4f7e-8a8b-000000000001"},
		},
		Ports: []Address{
			{TrType: "tcp", AdrFam: "ipv4", TrAddr: "192.0.2.1", TrSvcID: "4420"},
			{TrType: "tcp", AdrFam: "ipv4", TrAddr: "192.0.2.1", TrSvcID: "4421"},
			{TrType: "tcp", AdrFam: "ipv6", TrAddr: "fd00::1", TrSvcID: "4420"},
		},
		AllowedHosts: []string{hostA, hostB},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Normalize (-want +got):\n%s", diff)
	}
	// The caller's slices are not reordered.
	if e.Namespaces[0].NSID != 2 || e.AllowedHosts[0] != hostB {
		t.Error("Normalize modified its receiver's slices")
	}
}

func TestNormalizeRejects(t *testing.T) {
	base := func() Export {
		return Export{
			NQN:        "nqn.2024-01.io.pillar-csi:vol",
			Namespaces: []Namespace{{NSID: 1, DevicePath: "/dev/a"}},
			Ports:      []Address{tcp4420},
		}
	}
	for name, mut := range map[string]func(*Export){
		"bad nqn":          func(e *Export) { e.NQN = "vol" },
		"serial too long":  func(e *Export) { e.Attrs.Serial = strings.Repeat("s", 21) },
		"serial non-ascii": func(e *Export) { e.Attrs.Serial = "s\u00e9" },
		"serial trailing":  func(e *Export) { e.Attrs.Serial = "s " },
		"model too long":   func(e *Export) { e.Attrs.Model = strings.Repeat("m", 41) },
		"version":          func(e *Export) { e.Attrs.Version = "1" },
		"version overflow": func(e *Export) { e.Attrs.Version = "1.256" },
		"cntlid order":     func(e *Export) { e.Attrs.CntlIDMin, e.Attrs.CntlIDMax = 5, 5 },
		"cntlid reserved":  func(e *Export) { e.Attrs.CntlIDMax = 0xfff0 },
		"qid max":          func(e *Export) { e.Attrs.QIDMax = 129 },
		"nsid zero":        func(e *Export) { e.Namespaces[0].NSID = 0 },
		"nsid all":         func(e *Export) { e.Namespaces[0].NSID = 0xffffffff },
		"nsid twice":       func(e *Export) { e.Namespaces = append(e.Namespaces, e.Namespaces[0]) },
		"relative path":    func(e *Export) { e.Namespaces[0].DevicePath = "dev/a" },
		"newline path":     func(e *Export) { e.Namespaces[0].DevicePath = "/dev/a\n/dev/b" },
		"bad uuid":         func(e *Export) { e.Namespaces[0].DeviceUUID = "1234" },
		"bad nguid":        func(e *Export) { e.Namespaces[0].DeviceNGUID = "0102" },
		"ana group":        func(e *Export) { e.Namespaces[0].ANAGroupID = 129 },
		"trtype":           func(e *Export) { e.Ports[0].TrType = "udp" },
		"adrfam":           func(e *Export) { e.Ports[0].AdrFam = "inet" },
		"tcp over ib":      func(e *Export) { e.Ports[0].AdrFam = "ib" },
		"ipv4 given ipv6":  func(e *Export) { e.Ports[0].TrAddr = "::1" },
		"ipv6 given ipv4":  func(e *Export) { e.Ports[0].AdrFam = "ipv6" },
		"hostname":         func(e *Export) { e.Ports[0].TrAddr = "storage.local" },
		"port zero":        func(e *Export) { e.Ports[0].TrSvcID = "0" },
		"port name":        func(e *Export) { e.Ports[0].TrSvcID = "nvme" },
		"port octal":       func(e *Export) { e.Ports[0].TrSvcID = "06123" },
		"port not octal":   func(e *Export) { e.Ports[0].TrSvcID = "09123" },
		"port twice":       func(e *Export) { e.Ports = append(e.Ports, e.Ports[0]) },
		"port mapped twice": func(e *Export) {
			e.Ports = append(e.Ports, Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "::ffff:" + e.Ports[0].TrAddr, TrSvcID: e.Ports[0].TrSvcID})
		},
		"traddr space":      func(e *Export) { e.Ports[0] = Address{TrType: "fc", AdrFam: "fc", TrAddr: "a b"} },
		"host twice":        func(e *Export) { e.AllowedHosts = []string{hostA, hostA} },
		"bad host":          func(e *Export) { e.AllowedHosts = []string{"host"} },
		"any host and list": func(e *Export) { e.Attrs.AllowAnyHost, e.AllowedHosts = true, []string{hostA} },
	} {
		e := base()
		mut(&e)
		if _, err := e.Normalize(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Normalize = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := base().Normalize(); err != nil {
		t.Fatalf("base export invalid: %v", err)
	}
}

func FuzzValidateNQN(f *testing.F) {
	for _, s := range []string{
		"nqn.2014-08.org.nvmexpress:uuid:0f2c7a9e-3c33-4c59-a2e5-7d7f7b6b1a01",
		"nqn.2016-06.io.spdk:cnode1", "nqn.2014-08.org.example:../..", DiscoveryNQN, "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, nqn string) {
		if ValidateNQN(nqn) != nil {
			return
		}
		// Whatever is accepted is one safe path element the kernel keeps
		// whole.
		if len(nqn) > MaxNQNLen || strings.ContainsAny(nqn, "/\x00\n ") || nqn == "." || nqn == ".." ||
			!strings.HasPrefix(nqn, "nqn.") || !utf8.ValidString(nqn) {
			t.Fatalf("accepted unsafe NQN %q", nqn)
		}
	})
}

func FuzzParseNGUID(f *testing.F) {
	for _, s := range []string{"0102030405060708090a0b0c0d0e0f10", "01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:10",
		"01020304-0506-0708-090a-0b0c0d0e0f10", "zz", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := parseNGUID(s)
		if err != nil {
			return
		}
		// The canonical form is a UUID-shaped string that parses to
		// itself both as an NGUID and as a UUID.
		if g2, err := parseNGUID(g); err != nil || g2 != g {
			t.Fatalf("parseNGUID(%q) = %q, reparsed %q, %v", s, g, g2, err)
		}
		if u, err := parseUUID(g); err != nil || u != g {
			t.Fatalf("canonical NGUID %q is not a canonical UUID: %v", g, err)
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.3", "2.0.1", "2.0.0", "1", "1.2.3.4", "-1.0", "65535.255.255"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseVersion(s)
		if err != nil {
			return
		}
		if v2, err := parseVersion(v); err != nil || v2 != v {
			t.Fatalf("parseVersion(%q) = %q, reparsed %q, %v", s, v, v2, err)
		}
	})
}

func FuzzNormalizeAddress(f *testing.F) {
	f.Add("tcp", "ipv4", "127.0.0.1", "4420")
	f.Add("tcp", "ipv6", "fe80::1%eth0", "4420")
	f.Add("rdma", "ipv6", "::ffff:1.2.3.4", "4420")
	f.Add("fc", "fc", "nn-0x1000:pn-0x2000", "")
	f.Add("loop", "loop", "", "")
	f.Fuzz(func(t *testing.T, trtype, adrfam, traddr, trsvcid string) {
		a, err := normalizeAddress("a", Address{TrType: trtype, AdrFam: adrfam, TrAddr: traddr, TrSvcID: trsvcid})
		if err != nil {
			return
		}
		// Normalizing is idempotent and yields attribute values the
		// kernel's sscanf("%s") keeps whole.
		if b, err := normalizeAddress("a", a); err != nil || b != a {
			t.Fatalf("normalize(%+v) = %+v, again %+v, %v", Address{trtype, adrfam, traddr, trsvcid}, a, b, err)
		}
		if strings.ContainsFunc(a.TrAddr+a.TrSvcID, isSpaceOrCtl) || len(a.TrAddr) > maxTrAddrLen {
			t.Fatalf("unsafe address %+v", a)
		}
		if PreferredPortID(a) == 0 || PreferredPortID(a) > maxPortID {
			t.Fatalf("port ID out of range for %+v", a)
		}
	})
}

func FuzzParseAttrs(f *testing.F) {
	f.Add("1\n", "65519\n", "-1\n")
	f.Add("", "x", "99999999999999999999")
	f.Fuzz(func(t *testing.T, b, u, i string) {
		// Reading hostile attribute contents never panics, and a value
		// that parses is returned exactly.
		root := t.TempDir()
		k := &attrSet{sys: realSys{}, dir: root, names: map[string]bool{"b": true, "u": true, "i": true}}
		for name, v := range map[string]string{"b": b, "u": u, "i": i} {
			if err := os.WriteFile(root+"/"+name, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		bv, uv, iv := k.boolean("b"), k.uint("u", 16), k.int("i")
		if k.err == nil && (bv && strings.TrimSuffix(b, "\n") != "1" || uv > 0xffff) {
			t.Fatalf("parsed %q,%q,%q as %v,%v,%v", b, u, i, bv, uv, iv)
		}
	})
}

func TestParseIDAsTheKernel(t *testing.T) {
	// kstrtou16/kstrtou32 with base 0 (lib/kstrtox.c).
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"16", 16, true}, {"0x10", 16, true}, {"0X1f", 31, true},
		{"010", 8, true}, {"+7", 7, true}, {"7\n", 7, true}, {"65535", 65535, true},
		{"65536", 0, false}, {"08", 0, false}, {"0x", 0, false}, {"0xg", 0, false},
		{"0o7", 0, false}, {"0b1", 0, false}, {"1_0", 0, false}, {"-1", 0, false},
		{"", 0, false}, {"+", 0, false}, {" 1", 0, false}, {"1\n\n", 0, false}, {"++1", 0, false},
	} {
		got, err := parseID(c.in, 16)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("parseID(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
