package configfs

import (
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// kstrtou is a transcription of the kernel's kstrtou16/kstrtouint with
// base 0 (lib/kstrtox.c: kstrtoull, _parse_integer_fixup_radix,
// _parse_integer_limit), character for character, as the reference parseID
// is held to. s is a C string: it ends at the first NUL.
func kstrtou(s string, bits int) (uint64, bool) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	at := func(i int) byte { // s[i], or the terminating NUL
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	lower := func(c byte) byte { return c | 0x20 }
	isxdigit := func(c byte) bool { return c >= '0' && c <= '9' || lower(c) >= 'a' && lower(c) <= 'f' }

	// kstrtoull
	if at(0) == '+' {
		s = s[1:]
	}
	// _parse_integer_fixup_radix, base 0
	base := uint64(10)
	if at(0) == '0' {
		if lower(at(1)) == 'x' && isxdigit(at(2)) {
			base = 16
		} else {
			base = 8
		}
	}
	if base == 16 && at(0) == '0' && lower(at(1)) == 'x' {
		s = s[2:]
	}
	// _parse_integer_limit
	var res uint64
	rv, overflow := 0, false
digits:
	for ; rv < len(s); rv++ {
		c := s[rv]
		var val uint64
		switch {
		case c >= '0' && c <= '9':
			val = uint64(c - '0')
		case lower(c) >= 'a' && lower(c) <= 'f':
			val = uint64(lower(c)-'a') + 10
		default:
			break digits
		}
		if val >= base {
			break
		}
		// res & (~0ull << 60): only then can res * base + val overflow.
		if res>>60 != 0 && res > (^uint64(0)-val)/base {
			overflow = true
		}
		res = res*base + val
	}
	// _kstrtoull
	if overflow || rv == 0 {
		return 0, false
	}
	s = s[rv:]
	if at(0) == '\n' {
		s = s[1:]
	}
	if at(0) != 0 {
		return 0, false
	}
	// kstrtou16 / kstrtouint: the value must fit.
	if res>>bits != 0 {
		return 0, false
	}
	return res, true
}

func TestKstrtouReference(t *testing.T) {
	// The cases TestParseIDAsTheKernel lists, checked against the
	// transcription itself.
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"16", 16, true}, {"0x10", 16, true}, {"0X1f", 31, true},
		{"010", 8, true}, {"+7", 7, true}, {"7\n", 7, true}, {"65535", 65535, true},
		{"65536", 0, false}, {"08", 0, false}, {"0x", 0, false}, {"0xg", 0, false},
		{"", 0, false}, {"+", 0, false}, {" 1", 0, false}, {"1\n\n", 0, false}, {"++1", 0, false},
		{"18446744073709551616", 0, false},
	} {
		got, ok := kstrtou(c.in, 16)
		if ok != c.ok || got != c.want {
			t.Errorf("kstrtou(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParseID holds parseID, which reads port, namespace and ANA group
// directory names, to the kernel's parser: the same names accepted, with
// the same values. Directory names never hold a NUL, so neither do the
// inputs.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"0", "1", "16", "0x10", "0X1f", "010", "08", "+7", "7\n", "65535", "65536",
		"4294967295", "4294967296", "0x", "0xg", "0x\n", "+", "++1", "-1", " 1", "1\n\n", "1_0", "0o7", "0b1",
		"0xffffffffffffffffff", "00000000000000000000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			return
		}
		for _, bits := range []int{16, 32} {
			got, err := parseID(s, bits)
			want, ok := kstrtou(s, bits)
			if (err == nil) != ok || ok && got != want {
				t.Fatalf("parseID(%q, %d) = %d, %v; the kernel gives %d, %v", s, bits, got, err, want, ok)
			}
		}
	})
}

// FuzzServiceID checks what normalizeAddress accepts as a TCP or RDMA
// service ID (trsvcid) against the kernel's parser: the transports read
// it with kstrtou16(s, 0) when the port is enabled, so the port they
// listen on must be the decimal number the caller wrote.
func FuzzServiceID(f *testing.F) {
	for _, s := range []string{"4420", "04420", "0", "00", "1", "65535", "65536", "+4420", "0x1144", "4420\n",
		" 4420", "-1", "４４２０", ""} {
		f.Add(s, "127.0.0.1")
	}
	f.Add("4420", "::ffff:10.0.0.1")
	f.Add("4420", "::ffff:0a00:0001")
	f.Add("4420", "fe80::1%eth0")
	f.Fuzz(func(t *testing.T, svc, ip string) {
		for _, fam := range []string{"ipv4", "ipv6"} {
			a, err := normalizeAddress("a", Address{TrType: "tcp", AdrFam: fam, TrAddr: ip, TrSvcID: svc})
			if err != nil {
				continue
			}
			dec, derr := strconv.ParseUint(a.TrSvcID, 10, 16)
			kern, ok := kstrtou(a.TrSvcID, 16)
			if derr != nil || !ok || dec != kern || dec == 0 {
				t.Fatalf("trsvcid %q accepted: decimal %d (%v), the kernel reads %d (%v)", a.TrSvcID, dec, derr, kern, ok)
			}
			// The address is canonical: an IPv4-mapped IPv6 address is
			// its IPv4 address (one listener), and the family matches.
			addr, err := netip.ParseAddr(a.TrAddr)
			if err != nil || addr.String() != a.TrAddr || addr.Is4In6() ||
				(a.AdrFam == "ipv4") != addr.Is4() {
				t.Fatalf("normalizeAddress(%s, %q) = %+v: not a canonical %s literal", fam, ip, a, a.AdrFam)
			}
		}
	})
}

// FuzzNormalize holds Export.Normalize to being idempotent (what Apply
// writes and what State.Export reads back compare equal) and to accepting
// only values the kernel keeps whole.
func FuzzNormalize(f *testing.F) {
	f.Add("nqn.2014-08.org.example:a", "serial", "model", "1.3", uint32(1), "/dev/loop0",
		"b4a5c6d7-0000-4000-8000-00000000000A", "0102030405060708090a0b0c0d0e0f10", "nqn.2014-08.org.example:h",
		"tcp", "ipv4", "127.0.0.1", "4420", uint16(1), uint16(2), false)
	f.Add("nqn.2014-08.org.example:a", "", "", "2.0.0", uint32(7), "/dev/zd0", "", "01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:10",
		"", "tcp", "ipv6", "::ffff:1.2.3.4", "4420", uint16(0), uint16(0), true)
	f.Add("nqn.2014-08.org.example:a", "trailing ", "\x7f", "1.2.3.4", uint32(0), "dev", "zz", "zz",
		"nqn.2014-08.org.example:a/b", "loop", "loop", "", "", uint16(9), uint16(9), true)
	f.Fuzz(func(t *testing.T, nqn, serial, model, version string, nsid uint32, devicePath, uuid, nguid, host,
		trtype, adrfam, traddr, trsvcid string, cntlMin, cntlMax uint16, anyHost bool) {
		e := Export{
			NQN:        nqn,
			Attrs:      SubsystemAttrs{AllowAnyHost: anyHost, Serial: serial, Model: model, Version: version, CntlIDMin: cntlMin, CntlIDMax: cntlMax},
			Namespaces: []Namespace{{NSID: nsid, DevicePath: devicePath, DeviceUUID: uuid, DeviceNGUID: nguid, Enabled: true}},
			Ports:      []Address{{TrType: trtype, AdrFam: adrfam, TrAddr: traddr, TrSvcID: trsvcid}},
		}
		if host != "" {
			e.AllowedHosts = []string{host}
		}
		n, err := e.Normalize()
		if err != nil {
			if !IsInvalid(err) {
				t.Fatalf("Normalize: %v is not an invalid-input error", err)
			}
			return
		}
		again, err := n.Normalize()
		if err != nil || !reflect.DeepEqual(again, n) {
			t.Fatalf("Normalize is not idempotent: %+v, then %+v, %v", n, again, err)
		}
		// Every value is one attribute write the kernel keeps whole: no
		// newline (device_path stops at it, the others are sscanf'd),
		// no NUL, and at most one page.
		a := n.Attrs
		for _, v := range []string{n.NQN, a.Serial, a.Model, a.Version, n.Namespaces[0].DevicePath,
			n.Namespaces[0].DeviceUUID, n.Namespaces[0].DeviceNGUID, n.Ports[0].TrAddr, n.Ports[0].TrSvcID} {
			if strings.ContainsAny(v, "\n\x00") || len(v) > maxAttrLen {
				t.Fatalf("Normalize accepted the value %q", v)
			}
		}
	})
}
