package fencing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFileName(t *testing.T) {
	long := strings.Repeat("\xff", MaxVolumeIDLen)
	cases := []struct{ id, want string }{
		{"pvc-0b3e4c1a-77f0-4f7e-a8a5-0c6f3fdd2b6e", "v.pvc-0b3e4c1a-77f0-4f7e-a8a5-0c6f3fdd2b6e"},
		{"a", "v.a"},
		{"A", "v._41"},
		{".", "v._2e"},
		{"..", "v._2e_2e"},
		{"../../etc/passwd", "v._2e_2e_2f_2e_2e_2fetc_2fpasswd"},
		{"under_score", "v.under_5fscore"},
		{"nul\x00byte", "v.nul_00byte"},
		{"ünï", "v._c3_bcn_c3_af"},
		{long, "b." + nameBase32.EncodeToString([]byte(long))},
	}
	for _, c := range cases {
		got, err := FileName(c.id)
		if err != nil || got != c.want {
			t.Errorf("FileName(%q) = %q, %v; want %q", c.id, got, err, c.want)
			continue
		}
		back, err := VolumeIDFromFileName(got)
		if err != nil || back != c.id {
			t.Errorf("VolumeIDFromFileName(%q) = %q, %v; want %q", got, back, err, c.id)
		}
	}
	for _, id := range []string{"", strings.Repeat("a", MaxVolumeIDLen+1)} {
		if _, err := FileName(id); !errors.Is(err, ErrMalformed) {
			t.Errorf("FileName of %d bytes: err %v, want ErrMalformed", len(id), err)
		}
	}
	// Where the readable form stops fitting: 78 escaped bytes still fit
	// in maxNameLen, 79 do not.
	for n, prefix := range map[int]string{(maxNameLen - 2) / 3: "v.", (maxNameLen-2)/3 + 1: "b."} {
		name, _ := FileName(strings.Repeat("A", n))
		if !strings.HasPrefix(name, prefix) {
			t.Errorf("%d escaped bytes: name %q, want prefix %q", n, name, prefix)
		}
	}
}

func TestVolumeIDFromFileNameRejects(t *testing.T) {
	for _, name := range []string{
		"", ".", "..", "v.", "b.", "retired.ledger", ".v.pvc-1123456",
		"v._61",   // "a" must be written as "a"
		"v.A",     // upper case is always escaped
		"v._4",    // truncated escape
		"v._4G",   // bad hex
		"v._4A",   // upper-case hex
		"v.a/b",   // separator
		"b.mfra",  // base32 for an ID whose readable name fits
		"b.MFRGG", // upper-case base32
		"x.abc",
	} {
		if id, err := VolumeIDFromFileName(name); err == nil {
			t.Errorf("VolumeIDFromFileName(%q) = %q, want an error", name, id)
		}
	}
}

// checkSafeName fails unless name is one path element of the safe alphabet
// that leaves room for renameio's temporary name.
func checkSafeName(t *testing.T, name string) {
	t.Helper()
	if len(name) > maxNameLen || name == "." || name == ".." || strings.HasPrefix(name, ".") {
		t.Fatalf("unsafe name %q", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(keptByte(c) || c == '_' || c == '.') {
			t.Fatalf("name %q has byte %q", name, c)
		}
	}
	if filepath.Base(name) != name || filepath.Clean(name) != name {
		t.Fatalf("name %q is not a single clean path element", name)
	}
	if strings.ToLower(name) != name {
		t.Fatalf("name %q has upper-case letters", name)
	}
}

// FuzzFileName: every valid volume ID maps to a safe name that maps back to
// it, and the mapping never accepts a name it would not produce.
func FuzzFileName(f *testing.F) {
	for _, s := range []string{"pvc-1", "A", "../x", "\x00", strings.Repeat("\xfe", 128), strings.Repeat("a", 128), "v._61"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, err := FileName(id)
		if ValidateVolumeID(id) != nil {
			if err == nil {
				t.Fatalf("FileName(%q) accepted an invalid ID", id)
			}
		} else {
			if err != nil {
				t.Fatalf("FileName(%q): %v", id, err)
			}
			checkSafeName(t, name)
			back, err := VolumeIDFromFileName(name)
			if err != nil || back != id {
				t.Fatalf("round trip %q -> %q -> %q, %v", id, name, back, err)
			}
		}
		// The input as a candidate name: if accepted, it must be the
		// canonical name of the ID it decodes to (injectivity).
		if back, err := VolumeIDFromFileName(id); err == nil {
			if again, _ := FileName(back); again != id {
				t.Fatalf("name %q decodes to %q whose name is %q", id, back, again)
			}
		}
	})
}

func TestMarkRoundTrip(t *testing.T) {
	marks := []*Mark{
		active(uidA, 0),
		active(uidA, ^uint64(0), uidB, uidC),
		ended(uidA, 7, uidA),
		ended(uidC, 1, uidA, uidB, uidC),
	}
	for _, id := range []string{"pvc-1", strings.Repeat("\x00", MaxVolumeIDLen)} {
		for _, m := range marks {
			data, err := encodeMark(id, m)
			if err != nil {
				t.Fatal(err)
			}
			gotID, got, err := decodeMark(data)
			if err != nil || gotID != id {
				t.Fatalf("decode(%v) = %q, %v", m, gotID, err)
			}
			if diff := cmp.Diff(m, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		}
	}
}

func TestMarkEncodeRejectsInvalid(t *testing.T) {
	for _, m := range []*Mark{
		{Phase: 0, UID: uidA},
		{Phase: PhaseActive, UID: ""},
		active(uidA, 1, uidA),       // active and ended at once
		ended(uidA, 1),              // ended without history
		ended(uidA, 1, uidA, uidB),  // ended lifecycle is not the last
		active(uidA, 1, uidB, uidB), // duplicate history
	} {
		if _, err := encodeMark("pvc-1", m); err == nil {
			t.Errorf("encodeMark(%v) accepted an invalid mark", m)
		}
	}
}

// TestMarkDecodeDetectsDamage flips every bit and cuts every prefix of a
// valid mark: each damaged copy must be refused with ErrCorruptMark.
func TestMarkDecodeDetectsDamage(t *testing.T) {
	data, err := encodeMark("pvc-1", ended(uidB, 9, uidA, uidB))
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		for bit := 0; bit < 8; bit++ {
			d := bytes.Clone(data)
			d[i] ^= 1 << bit
			if _, _, err := decodeMark(d); !errors.Is(err, ErrCorruptMark) {
				t.Fatalf("bit %d of byte %d flipped: err %v", bit, i, err)
			}
		}
	}
	for n := 0; n < len(data); n++ {
		if _, _, err := decodeMark(data[:n]); !errors.Is(err, ErrCorruptMark) {
			t.Fatalf("first %d bytes: err %v", n, err)
		}
	}
	if _, _, err := decodeMark(append(bytes.Clone(data), 0)); !errors.Is(err, ErrCorruptMark) {
		t.Fatalf("trailing byte: err %v", err)
	}
}

// FuzzDecodeMark: decoding never panics, fails only with ErrCorruptMark,
// and whatever it accepts is a valid mark that encodes back to the same
// bytes (so there is exactly one encoding of each mark).
func FuzzDecodeMark(f *testing.F) {
	for _, m := range []*Mark{active(uidA, 3), ended(uidB, 9, uidA, uidB)} {
		data, _ := encodeMark("pvc-1", m)
		f.Add(data)
	}
	f.Add([]byte("PCFM"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeMark(t, data)
		// The same bytes with a valid checksum, so that the fuzzer reaches
		// the field decoding behind the checksum test.
		checkDecodeMark(t, withChecksum(data))
	})
}

func withChecksum(data []byte) []byte {
	return binary.LittleEndian.AppendUint32(bytes.Clone(data), crc32.Checksum(data, castagnoli))
}

func checkDecodeMark(t *testing.T, data []byte) {
	t.Helper()
	{
		id, m, err := decodeMark(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptMark) {
				t.Fatalf("error does not wrap ErrCorruptMark: %v", err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("error message is not valid UTF-8: %q", err.Error())
			}
			return
		}
		again, err := encodeMark(id, m)
		if err != nil {
			t.Fatalf("decoded mark does not encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded mark encodes differently:\n in  %x\n out %x", data, again)
		}
	}
}

func TestLedgerRoundTrip(t *testing.T) {
	l := &ledger{}
	for i, n := range []int{0, 1, 500} {
		var fps []fingerprint
		for j := 0; j < n; j++ {
			fps = append(fps, fingerprintOf("pvc", strings.Repeat("u", 1+j%100)+string(rune('a'+i))))
		}
		l, _ = l.with(fps)
		got, err := decodeLedger(l.encode())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(l.fps, got.fps, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
		for _, fp := range fps {
			if !got.contains(fp) {
				t.Fatalf("ledger lost %x", fp)
			}
		}
	}
	if l.contains(fingerprintOf("pvc", "never-added")) {
		t.Fatal("ledger contains a fingerprint never added")
	}
	// Fingerprints depend on the volume and on the split between ID and UID.
	if fingerprintOf("ab", "c") == fingerprintOf("a", "bc") || fingerprintOf("v1", uidA) == fingerprintOf("v2", uidA) {
		t.Fatal("fingerprints collide across volumes")
	}
}

// FuzzDecodeLedger: decoding never panics and accepts only canonical files.
func FuzzDecodeLedger(f *testing.F) {
	l, _ := (&ledger{}).with([]fingerprint{fingerprintOf("a", "b"), fingerprintOf("c", "d")})
	f.Add(l.encode())
	f.Add((&ledger{}).encode())
	f.Add([]byte("PCFL\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range [][]byte{data, withChecksum(data)} {
			got, err := decodeLedger(d)
			if err != nil {
				if !errors.Is(err, ErrCorruptMark) {
					t.Fatalf("error does not wrap ErrCorruptMark: %v", err)
				}
				continue
			}
			if !bytes.Equal(got.encode(), d) {
				t.Fatalf("accepted a non-canonical ledger")
			}
		}
	})
}
