package lvm_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/internal/replaytest"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
)

func TestLVName(t *testing.T) {
	for _, c := range []struct {
		vg, id, want string
	}{
		{"vg0", "pvc-1", "pvc-1"},
		// lvcreate: 'Names starting "snapshot" are reserved', and
		// "pvmove" too. The hashes are the names the lab created.
		{"vg0", "snapshot-1", "pillar_79c6d61344be00e74b64db50b5b9639b"},
		{"vg0", "pvmove.2", "pillar_dc0fa46055563f0dfd37335c4a443fba"},
		{"vg0", "snapshots", "pillar_" + hash("snapshots")},
		// The device-mapper name "vg0-ID" plus "-tpool" fits 127 bytes
		// with 117 plain characters, not with 118.
		{"vg0", strings.Repeat("a", 117), strings.Repeat("a", 117)},
		{"vg0", strings.Repeat("a", 118), "pillar_" + hash(strings.Repeat("a", 118))},
		// Every '-' counts twice ("a--a" in the device-mapper name).
		{"vg0", strings.Repeat("a-", 38) + "aaa", strings.Repeat("a-", 38) + "aaa"},
		{"vg0", strings.Repeat("a-", 39) + "a", "pillar_" + hash(strings.Repeat("a-", 39)+"a")},
		{"my-vg", strings.Repeat("b", 114), strings.Repeat("b", 114)},
		{"my-vg", strings.Repeat("b", 115), "pillar_" + hash(strings.Repeat("b", 115))},
	} {
		if got := lvm.LVName(c.vg, c.id); got != c.want {
			t.Errorf("LVName(%q, %q) = %q, want %q", c.vg, c.id, got, c.want)
		}
	}
}

// hash is what LVName uses, spelled out independently: the first 16 bytes
// of SHA-256 in hex (checked against the names the lab created above).
func hash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

func FuzzLVName(f *testing.F) {
	f.Add("vg0", "pvc-1")
	f.Add("a-b-c", "snapshot-x")
	f.Fuzz(func(t *testing.T, vg, id string) {
		if backends.ValidateVolumeID(id) != nil || len(vg) == 0 || len(vg) > 40 {
			return
		}
		name := lvm.LVName(vg, id)
		dm := len(vg) + strings.Count(vg, "-") + 1 + len(name) + strings.Count(name, "-")
		switch {
		case name == id:
			if strings.HasPrefix(id, "snapshot") || strings.HasPrefix(id, "pvmove") || dm+len("-tpool") > 127 {
				t.Fatalf("LVName(%q, %q) kept an ID LVM refuses", vg, id)
			}
		case !strings.HasPrefix(name, "pillar_") || len(name) != len("pillar_")+32:
			t.Fatalf("LVName(%q, %q) = %q, neither the ID nor a hashed name", vg, id, name)
		}
	})
}

// TestDMPath: lv_dm_path as lvs reports it ("vg0-pvc--conformance" in
// the captures), for a group name with a '-' as well.
func TestDMPath(t *testing.T) {
	for _, c := range []struct{ vg, lv, want string }{
		{"vg0", "pvc-conformance", "/dev/mapper/vg0-pvc--conformance"},
		{"my-vg", "pvc--1", "/dev/mapper/my--vg-pvc----1"},
		{"vg_0", "pillar_79c6", "/dev/mapper/vg_0-pillar_79c6"},
	} {
		if got := lvm.DMPath(c.vg, c.lv); got != c.want {
			t.Errorf("DMPath(%q, %q) = %q, want %q", c.vg, c.lv, got, c.want)
		}
	}
}

func TestReservedNamesReplay(t *testing.T) {
	replaytest.Run(t, "testdata/lvm-names", newBackend("", nil), []replaytest.Case{
		{Label: "create-snapshot", Call: replaytest.Create("snapshot-1", extent),
			Want: &backends.Volume{ID: "snapshot-1", Name: "vg0/pillar_79c6d61344be00e74b64db50b5b9639b", SizeBytes: extent,
				DevicePath: "/dev/mapper/vg0-pillar_79c6d61344be00e74b64db50b5b9639b"}},
		{Label: "create-pvmove", Call: replaytest.Create("pvmove.2", extent),
			Want: &backends.Volume{ID: "pvmove.2", Name: "vg0/pillar_dc0fa46055563f0dfd37335c4a443fba", SizeBytes: extent,
				DevicePath: "/dev/mapper/vg0-pillar_dc0fa46055563f0dfd37335c4a443fba"}},
	})
}
