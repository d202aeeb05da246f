package export

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// The expected values were computed independently (Python's uuid.uuid5 and
// hashlib.sha256). They are the contract: if this test has to change, every
// existing volume's identity changes with it.
func TestForIsStable(t *testing.T) {
	for _, tc := range []struct {
		id, uuid, nguid string
	}{
		{"pvc-0b5a3f7e-6f1c-4f4e-9d7a-2b1c3d4e5f60", "7ad685a8-adb1-5d9b-960e-9c933e59876e", "bc060007-1e6c-373f-2c9b-25374f67cbfb"},
		{"a", "6f7406ba-9227-52ac-95af-cd827393f1b4", "9ac0135b-1931-f553-02da-251d82f95cdc"},
		{"vol.1", "22a6da53-0a45-5850-9859-4b4fa8c20c26", "4561654a-098e-5bd5-b9f3-62b5c7b07638"},
	} {
		got, err := For(tc.id)
		if err != nil {
			t.Fatalf("For(%q): %v", tc.id, err)
		}
		want := Identity{
			VolumeID:     tc.id,
			SubsystemNQN: "nqn.2026-01.io.pillar-csi:volume:" + tc.id,
			NamespaceID:  1,
			UUID:         tc.uuid,
			NGUID:        tc.nguid,
		}
		if got != want {
			t.Errorf("For(%q) =\n  %+v\nwant\n  %+v", tc.id, got, want)
		}
		if err := ValidateNQN(got.SubsystemNQN); err != nil {
			t.Errorf("derived NQN is not valid: %v", err)
		}
		if back, ok := VolumeIDFromNQN(got.SubsystemNQN); !ok || back != tc.id {
			t.Errorf("VolumeIDFromNQN(%q) = %q, %v; want %q, true", got.SubsystemNQN, back, ok, tc.id)
		}
	}
}

func TestUUIDNamespaceBytesMatchConstant(t *testing.T) {
	if got := formatUUID(uuidNS); got != PillarUUIDNamespace {
		t.Fatalf("uuidNS formats as %s, PillarUUIDNamespace is %s", got, PillarUUIDNamespace)
	}
}

// RFC 9562 appendix A.4: the version 5 UUID of "www.example.com" in the DNS
// namespace.
func TestUUIDV5MatchesRFC(t *testing.T) {
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got, want := formatUUID(uuidV5(dns, "www.example.com")), "2ed6657d-e927-568b-95e1-2665a8aea6a2"; got != want {
		t.Fatalf("uuidV5 = %s, want %s", got, want)
	}
}

func TestValidateVolumeID(t *testing.T) {
	for _, id := range []string{"a", "0", "pvc-1", "a.b-c", strings.Repeat("a", 128)} {
		if err := ValidateVolumeID(id); err != nil {
			t.Errorf("ValidateVolumeID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "-a", "a-", ".a", "a.", "A", "a_b", "a/b", "a b", "a:b", "é", strings.Repeat("a", 129)} {
		err := ValidateVolumeID(id)
		if !errors.Is(err, ErrInvalidVolumeID) {
			t.Errorf("ValidateVolumeID(%q) = %v, want ErrInvalidVolumeID", id, err)
		}
		_, err = For(id)
		var e *Error
		if !errors.As(err, &e) || e.Op != "export.For" || e.Value != id || !errors.Is(err, ErrInvalidVolumeID) {
			t.Errorf("For(%q) error = %#v, want *Error wrapping ErrInvalidVolumeID", id, err)
		}
	}
}

func TestValidateNQN(t *testing.T) {
	for _, nqn := range []string{
		"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
		"nqn.1994-05.com.redhat:3c5e6f1a2b",
		"nqn.2026-01.io.pillar-csi:volume:pvc-1",
		"nqn.2014-08.com.Example:host_01+a=b",
		"nqn.2014-08.com.example:" + strings.Repeat("x", MaxNQNLength-len("nqn.2014-08.com.example:")),
	} {
		if err := ValidateNQN(nqn); err != nil {
			t.Errorf("ValidateNQN(%q) = %v, want nil", nqn, err)
		}
	}
	for _, nqn := range []string{
		"",
		"nqn.2014-08.org.nvmexpress",        // no name part
		"nqn.2014-08.org.nvmexpress:",       // empty name part
		"nqn.2014-13.org.example:x",         // month 13
		"nqn.14-08.org.example:x",           // two-digit year
		"iqn.2014-08.org.example:x",         // an iSCSI name
		"nqn.2014-08.-org.example:x",        // label starts with '-'
		"nqn.2014-08.org.example:a/b",       // '/' cannot be a configfs name
		"nqn.2014-08.org.example:a b",       // space
		"nqn.2014-08.org.example:caf\u00e9", // non-ASCII
		// 223 bytes: the specification's limit, which the Linux initiator refuses
		"nqn.2014-08.com.example:" + strings.Repeat("x", 223-len("nqn.2014-08.com.example:")),
	} {
		err := ValidateNQN(nqn)
		var e *Error
		if !errors.Is(err, ErrInvalidNQN) || !errors.As(err, &e) || e.Value != nqn {
			t.Errorf("ValidateNQN(%q) = %v, want *Error wrapping ErrInvalidNQN", nqn, err)
		}
	}
}

func TestVolumeIDFromNQNRejectsForeignSubsystems(t *testing.T) {
	for _, nqn := range []string{
		"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
		"nqn.2026-01.io.pillar-csi:volume:",
		"nqn.2026-01.io.pillar-csi:volume:Bad_ID",
		"nqn.2026-01.io.pillar-csi:other:pvc-1",
		"nqn.2026-01.io.pillar-csi:volume",
	} {
		if id, ok := VolumeIDFromNQN(nqn); ok {
			t.Errorf("VolumeIDFromNQN(%q) = %q, true; want not pillar-owned", nqn, id)
		}
	}
}

// Distinct volumes must never share an identifier: the node would find the
// wrong device.
func TestIdentitiesAreDistinct(t *testing.T) {
	seen := map[string]string{}
	for i := range 20000 {
		id := "pvc-" + strings.Repeat("0", i%7) + strconv.Itoa(i)
		got, err := For(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{got.SubsystemNQN, got.UUID, got.NGUID} {
			if prev, dup := seen[v]; dup {
				t.Fatalf("%s and %s share identifier %s", prev, id, v)
			}
			seen[v] = id
		}
	}
}

func FuzzFor(f *testing.F) {
	f.Add("pvc-1")
	f.Add("")
	f.Add("a/b")
	f.Fuzz(func(t *testing.T, id string) {
		got, err := For(id)
		if err != nil {
			if !errors.Is(err, ErrInvalidVolumeID) {
				t.Fatalf("For(%q): error %v does not wrap ErrInvalidVolumeID", id, err)
			}
			return
		}
		if ValidateNQN(got.SubsystemNQN) != nil || len(got.SubsystemNQN) > MaxNQNLength {
			t.Fatalf("For(%q) gives invalid NQN %q", id, got.SubsystemNQN)
		}
		if back, ok := VolumeIDFromNQN(got.SubsystemNQN); !ok || back != id {
			t.Fatalf("round trip of %q gives %q, %v", id, back, ok)
		}
	})
}
