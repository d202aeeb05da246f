//go:build kernel

package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// lvsRows runs lvs with a JSON report of fields for target (plus args, such
// as --binary) and returns its rows.
func lvsRows(t *testing.T, fields, target string, args ...string) []map[string]string {
	t.Helper()
	args = append(append([]string{"--reportformat", "json", "--units", "b", "--nosuffix"}, args...), "-o", fields, target)
	out, err := fixture.LVM(context.Background(), "lvs", args...)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Report []struct {
			LV []map[string]string `json:"lv"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("lvs %s: %v in %q", fields, err, out)
	}
	var rows []map[string]string
	for _, p := range r.Report {
		rows = append(rows, p.LV...)
	}
	return rows
}

func lvm1(t *testing.T, cmd string, args ...string) {
	t.Helper()
	if _, err := fixture.LVM(context.Background(), cmd, args...); err != nil {
		t.Fatal(err)
	}
}

// TestLVMZeroReport proves what LVM 2.03 reports about a thin pool's
// zeroing, which the backend reads from lv_attr: the eighth character is
// 'z' for a pool that zeroes new chunks (the default) and '-' for one
// created with lvcreate --zero n or changed with lvchange --zero n, and
// back to 'z' after lvchange --zero y, also with a thin LV active in the
// pool. The zero field says the same ("zero" or "", with --binary "1" or
// "0"), but it is a segment field: with it in -o, lvs reports one row per
// segment, so an LV extended into a second segment appears twice, which is
// why the backend does not ask for it.
func TestLVMZeroReport(t *testing.T) {
	guest.RequireGuest(t)
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 512 * fixture.MiB, ThinPoolSize: 64 * fixture.MiB})
	lvm1(t, "lvcreate", "--yes", "--type", "thin-pool", "--zero", "n", "--size", "64m", "--name", "nozero", vg.Name)
	t.Cleanup(func() { fixture.LVM(context.Background(), "lvremove", "--yes", vg.Name+"/nozero") })

	type want struct{ attr8, zero, binary string }
	check := func(pool string, w want) {
		t.Helper()
		plain := lvsRows(t, "lv_name,lv_attr,zero", vg.Name+"/"+pool)
		bin := lvsRows(t, "lv_name,lv_attr,zero", vg.Name+"/"+pool, "--binary")
		if len(plain) != 1 || len(bin) != 1 {
			t.Fatalf("lvs %s: %v and %v, want one row each", pool, plain, bin)
		}
		t.Logf("%s: lv_attr %q zero %q, with --binary zero %q", pool, plain[0]["lv_attr"], plain[0]["zero"], bin[0]["zero"])
		attr := plain[0]["lv_attr"]
		if len(attr) < 8 || attr[7:8] != w.attr8 || plain[0]["zero"] != w.zero || bin[0]["zero"] != w.binary {
			t.Errorf("%s: lv_attr %q zero %q (--binary %q); want lv_attr[7] %q, zero %q (--binary %q)",
				pool, attr, plain[0]["zero"], bin[0]["zero"], w.attr8, w.zero, w.binary)
		}
	}
	on, off := want{"z", "zero", "1"}, want{"-", "", "0"}
	check(vg.ThinPool, on)
	check("nozero", off)

	vg.CreateThin(t, "busy", 8*fixture.MiB)
	lvm1(t, "lvchange", "--zero", "n", vg.Name+"/"+vg.ThinPool)
	check(vg.ThinPool, off)
	lvm1(t, "lvchange", "--zero", "y", vg.Name+"/"+vg.ThinPool)
	check(vg.ThinPool, on)

	// A linear LV in two segments: "spacer" takes the extents after it,
	// so its extension is allocated elsewhere.
	vg.CreateLinear(t, "twoseg", extent)
	vg.CreateLinear(t, "spacer", extent)
	lvm1(t, "lvextend", "--size", strconv.FormatInt(2*extent, 10)+"b", vg.Name+"/twoseg")
	if rows := lvsRows(t, "lv_name,seg_count", vg.Name+"/twoseg"); len(rows) != 1 || rows[0]["seg_count"] != "2" {
		t.Fatalf("twoseg: %v, want one row with seg_count 2", rows)
	}
	if rows := lvsRows(t, "lv_name,lv_attr,vg_extent_size", vg.Name+"/twoseg"); len(rows) != 1 {
		t.Errorf("lvs with LV fields: %d rows for twoseg, want 1: %v", len(rows), rows)
	}
	rows := lvsRows(t, "lv_name,lv_attr,zero", vg.Name+"/twoseg")
	t.Logf("lvs -o lv_name,lv_attr,zero of a two-segment LV: %v", rows)
	if len(rows) != 2 {
		t.Errorf("lvs with the zero field: %d rows for twoseg, want one per segment (2): %v", len(rows), rows)
	}
}

// TestLVMThinPoolZeroing: the backend refuses a thin pool whose zeroing is
// off (Create and Capacity, ErrThinPoolNotZeroing, with one lvs each and
// nothing created), accepts it when AllowUnzeroedThinPool is set, and
// accepts it again without the opt-out after lvchange --zero y.
func TestLVMThinPoolZeroing(t *testing.T) {
	guest.RequireGuest(t)
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 1 * fixture.GiB, ThinPoolSize: 256 * fixture.MiB})
	rec := newRecorder(t, "lvm-zero", vg.Name, "vg0")
	newBackend := func(allow bool) backends.Backend {
		b, err := lvm.New(lvm.Config{VolumeGroup: vg.Name, ThinPool: vg.ThinPool, AllowUnzeroedThinPool: allow, Runner: rec})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	strict, allowing := newBackend(false), newBackend(true)
	ctx := ctxT(t)
	cleanup := func(b backends.Backend, id string) {
		t.Cleanup(func() {
			if err := b.Delete(context.Background(), id); err != nil {
				t.Errorf("delete %s: %v", id, err)
			}
		})
	}

	// A volume made while the pool zeroes; it stays, as volumes of a pool
	// an operator reconfigures would.
	if _, err := strict.Create(ctx, "pvc-before", 2*extent); err != nil {
		t.Fatal(err)
	}
	cleanup(strict, "pvc-before")
	lvm1(t, "lvchange", "--zero", "n", vg.Name+"/"+vg.ThinPool)

	before := rec.runs.Load()
	rec.step("create-not-zeroing")
	_, err := strict.Create(ctx, "pvc-refused", 2*extent)
	mustErr(t, err, backends.ErrThinPoolNotZeroing)
	t.Logf("create: %v", err)
	for _, s := range []string{vg.Name + "/" + vg.ThinPool, "lvchange --zero y " + vg.Name + "/" + vg.ThinPool} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}
	rec.step("capacity-not-zeroing")
	_, err = strict.Capacity(ctx)
	mustErr(t, err, backends.ErrThinPoolNotZeroing)
	rec.step("")
	if n := rec.runs.Load() - before; n != 2 {
		t.Errorf("%d commands for a refused create and capacity, want one lvs each", n)
	}
	if _, err := strict.Get(ctx, "pvc-refused"); !backends.IsNotFound(err) {
		t.Fatalf("Get of the refused volume: %v, want not found", err)
	}
	// What is there stays usable.
	if _, err := strict.Get(ctx, "pvc-before"); err != nil {
		t.Fatal(err)
	}

	rec.step("capacity-allowed")
	if c, err := allowing.Capacity(ctx); err != nil || c.TotalBytes != 256*fixture.MiB {
		t.Fatalf("Capacity with the opt-out = %+v, %v", c, err)
	}
	rec.step("create-allowed")
	if _, err := allowing.Create(ctx, "pvc-allowed", 2*extent); err != nil {
		t.Fatalf("Create with the opt-out: %v", err)
	}
	rec.step("")
	cleanup(allowing, "pvc-allowed")

	lvm1(t, "lvchange", "--zero", "y", vg.Name+"/"+vg.ThinPool)
	rec.step("capacity-zeroing")
	if _, err := strict.Capacity(ctx); err != nil {
		t.Fatalf("Capacity after lvchange --zero y: %v", err)
	}
	rec.step("")
	if _, err := strict.Create(ctx, "pvc-after", 2*extent); err != nil {
		t.Fatalf("Create after lvchange --zero y: %v", err)
	}
	cleanup(strict, "pvc-after")
}

// TestLVMLeakWithoutZeroing measures the leak the refusal prevents. A
// volume fills a thin pool with a pattern and is deleted; a new volume in
// the same pool gets a chunk of that space on its first write. The new
// volume writes 512 bytes at offset 0 and reads its first chunk back: in a
// pool with zeroing off the rest of the chunk is the deleted volume's data,
// in a pool that zeroes it reads as zeroes. lvchange --zero takes effect on
// the active pool at once, both ways.
//
// Seen in the lab (LVM 2.03.16, Linux 6.1, pools of 16 MiB with 64 KiB
// chunks): with zeroing off, whether the pool was created so or turned off
// later, the rest of the new volume's first chunk held 61440 bytes of the
// deleted volume's pattern and 3584 zero bytes. The kernel wrote the 512
// bytes as a whole 4 KiB page (read first from the unprovisioned volume,
// as zeroes), so everything past that page, 60 KiB, was the other
// volume's data. With zeroing on, all 65024 bytes were zero.
func TestLVMLeakWithoutZeroing(t *testing.T) {
	guest.RequireGuest(t)
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 256 * fixture.MiB})
	pattern := []byte("old tenant data!") // 16 bytes: every chunk starts with it
	for _, c := range []struct {
		pool   string
		zero   string // lvcreate --zero
		change string // lvchange --zero after the old volume is gone, or ""
		leak   bool
	}{
		{"nozero", "n", "", true},
		{"zeroes", "y", "", false},
		{"turnedoff", "y", "n", true},
		{"turnedon", "n", "y", false},
	} {
		t.Run(c.pool, func(t *testing.T) {
			lvm1(t, "lvcreate", "--yes", "--type", "thin-pool", "--zero", c.zero, "--size", "16m", "--name", c.pool, vg.Name)
			t.Cleanup(func() { fixture.LVM(context.Background(), "lvremove", "--yes", vg.Name+"/"+c.pool) })
			rows := lvsRows(t, "lv_name,lv_size,chunk_size,lv_attr", vg.Name+"/"+c.pool)
			if len(rows) != 1 {
				t.Fatalf("lvs: %v", rows)
			}
			size, err1 := strconv.ParseInt(rows[0]["lv_size"], 10, 64)
			chunk, err2 := strconv.Atoi(rows[0]["chunk_size"])
			if err1 != nil || err2 != nil || chunk%len(pattern) != 0 {
				t.Fatalf("lvs: %v", rows)
			}
			t.Logf("pool %s: %d bytes, chunk %d bytes, lv_attr %s", c.pool, size, chunk, rows[0]["lv_attr"])

			// The old volume writes the pattern over the whole pool, so
			// whichever chunk the new volume gets held it.
			lvm1(t, "lvcreate", "--yes", "--type", "thin", "--virtualsize", strconv.FormatInt(size, 10)+"b",
				"--thinpool", c.pool, "--name", "old-"+c.pool, vg.Name)
			fixture.WriteAt(t, vg.DevicePath("old-"+c.pool), 0, bytes.Repeat(pattern, int(size)/len(pattern)))
			if used := lvsRows(t, "data_percent", vg.Name+"/"+c.pool); len(used) != 1 || !strings.HasPrefix(used[0]["data_percent"], "100") {
				t.Fatalf("pool %s after the old volume's writes: %v, want it full", c.pool, used)
			}
			lvm1(t, "lvremove", "--yes", vg.Name+"/old-"+c.pool)
			if c.change != "" {
				lvm1(t, "lvchange", "--zero", c.change, vg.Name+"/"+c.pool)
			}

			lvm1(t, "lvcreate", "--yes", "--type", "thin", "--virtualsize", strconv.FormatInt(size, 10)+"b",
				"--thinpool", c.pool, "--name", "new-"+c.pool, vg.Name)
			t.Cleanup(func() { fixture.LVM(context.Background(), "lvremove", "--yes", vg.Name+"/new-"+c.pool) })
			dev := vg.DevicePath("new-" + c.pool)
			fixture.WriteAt(t, dev, 0, bytes.Repeat([]byte{0xa5}, 512))
			got := fixture.ReadAt(t, dev, 0, chunk)
			old, zero := 0, 0
			for i := 512; i < chunk; i++ {
				switch got[i] {
				case pattern[i%len(pattern)]:
					old++
				case 0:
					zero++
				}
			}
			t.Logf("pool %s: after a 512-byte write, the rest of the first %d-byte chunk holds %d bytes of the deleted volume's data and %d zero bytes",
				c.pool, chunk, old, zero)
			if !bytes.Equal(got[:512], bytes.Repeat([]byte{0xa5}, 512)) {
				t.Fatalf("the 512 bytes written did not read back")
			}
			if c.leak && old == 0 {
				t.Errorf("pool %s with zeroing off: no old data in the new volume's chunk", c.pool)
			}
			if !c.leak && zero != chunk-512 {
				t.Errorf("pool %s with zeroing on: %d of %d bytes are not zero", c.pool, chunk-512-zero, chunk-512)
			}
		})
	}
}

// oldData fills every free extent of vg with pattern through a linear LV
// of the raw tools, then removes it, as a deleted tenant's volume leaves
// them; it returns how many bytes it wrote.
func oldData(t *testing.T, vg *fixture.VG, pattern []byte) int64 {
	t.Helper()
	lvm1(t, "lvcreate", "--yes", "--extents", "100%FREE", "--name", "old", vg.Name)
	rows := lvsRows(t, "lv_size", vg.Name+"/old")
	size, err := strconv.ParseInt(rows[0]["lv_size"], 10, 64)
	if err != nil || len(rows) != 1 {
		t.Fatalf("lvs: %v", rows)
	}
	fixture.WriteAt(t, vg.DevicePath("old"), 0, bytes.Repeat(pattern, int(size)/len(pattern)))
	lvm1(t, "lvremove", "--yes", vg.Name+"/old")
	return size
}

// countOld counts the bytes of got that hold pattern at their offset off
// (got starts at off on the device).
func countOld(got, pattern []byte, off int64) int {
	n := 0
	for i, c := range got {
		if c != 0 && c == pattern[(off+int64(i))%int64(len(pattern))] {
			n++
		}
	}
	return n
}

// TestLVMLinearNoLeak: LVM hands a deleted LV's extents to the next LV as
// they are. With lvcreate --zero y alone a new linear LV reads the old
// data past its first 4 KiB (the control); the backend's Create and Expand
// zero every extent they hand out, and a Create cut short while zeroing is
// finished by its retry before the volume is returned.
func TestLVMLinearNoLeak(t *testing.T) {
	guest.RequireGuest(t)
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 96 * fixture.MiB})
	pattern := []byte("old tenant data!")
	b, err := lvm.New(lvm.Config{VolumeGroup: vg.Name})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("control", func(t *testing.T) {
		size := oldData(t, vg, pattern)
		lvm1(t, "lvcreate", "--yes", "--wipesignatures", "y", "--zero", "y", "--size", strconv.FormatInt(size, 10)+"b", "--name", "plain", vg.Name)
		got := fixture.ReadAt(t, vg.DevicePath("plain"), 0, int(size))
		lvm1(t, "lvremove", "--yes", vg.Name+"/plain")
		old := countOld(got, pattern, 0)
		t.Logf("lvcreate --zero y: %d of %d bytes of the new LV hold the deleted LV's data", old, size)
		if old == 0 {
			t.Fatal("no old data in a plain new LV: this test could not see a leak")
		}
	})

	t.Run("create-and-expand", func(t *testing.T) {
		size := oldData(t, vg, pattern)
		half := (size / 2) &^ (extent - 1)
		v, err := b.Create(ctxT(t), "pvc-noleak", half)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Delete(context.Background(), "pvc-noleak") })
		if old := countOld(fixture.ReadAt(t, v.DevicePath, 0, int(v.SizeBytes)), pattern, 0); old != 0 {
			t.Fatalf("the new volume reads %d bytes of the deleted LV's data", old)
		}
		mine := bytes.Repeat([]byte{0x5a}, int(v.SizeBytes))
		fixture.WriteAt(t, v.DevicePath, 0, mine)
		// The rest of the group held the old data again.
		lvm1(t, "lvcreate", "--yes", "--extents", "100%FREE", "--name", "old", vg.Name)
		rest := lvsRows(t, "lv_size", vg.Name+"/old")[0]["lv_size"]
		n, _ := strconv.ParseInt(rest, 10, 64)
		fixture.WriteAt(t, vg.DevicePath("old"), 0, bytes.Repeat(pattern, int(n)/len(pattern)))
		lvm1(t, "lvremove", "--yes", vg.Name+"/old")

		grown, err := b.Expand(ctxT(t), "pvc-noleak", v.SizeBytes+n)
		if err != nil {
			t.Fatal(err)
		}
		got := fixture.ReadAt(t, grown.DevicePath, 0, int(grown.SizeBytes))
		if !bytes.Equal(got[:len(mine)], mine) {
			t.Fatal("Expand changed the volume's own data")
		}
		grownRange := got[len(mine):]
		if nonzero := len(grownRange) - bytes.Count(grownRange, []byte{0}); nonzero != 0 || int64(len(got)) != v.SizeBytes+n {
			t.Fatalf("the grown range (%d bytes) reads %d bytes that are not zero", len(grownRange), nonzero)
		}
		if tags := lvsRows(t, "lv_tags", vg.Name+"/"+lvm.LVName(vg.Name, "pvc-noleak"))[0]["lv_tags"]; strings.Contains(tags, "zero-from") {
			t.Errorf("a zero tag is left after Expand: %s", tags)
		}
	})

	t.Run("create-resumed", func(t *testing.T) {
		// A Create that died after lvcreate, before zeroing was done: the
		// LV is there with its ownership tag and zero tag, on old data.
		size := oldData(t, vg, pattern)
		id := "pvc-resumed"
		name := lvm.LVName(vg.Name, id)
		lvm1(t, "lvcreate", "--yes", "--wipesignatures", "y", "--zero", "y", "--activate", "y", "--setactivationskip", "n",
			"--name", name, "--addtag", lvm.TagPrefix+id, "--addtag", "pillar-csi.io_zero-from_0", "--size", strconv.FormatInt(size, 10)+"b", vg.Name)
		t.Cleanup(func() { b.Delete(context.Background(), id) })
		v, err := b.Create(ctxT(t), id, size)
		if err != nil {
			t.Fatal(err)
		}
		if old := countOld(fixture.ReadAt(t, v.DevicePath, 0, int(v.SizeBytes)), pattern, 0); old != 0 {
			t.Fatalf("the retried Create returned a volume that reads %d bytes of the deleted LV's data", old)
		}
		if tags := lvsRows(t, "lv_tags", vg.Name+"/"+name)[0]["lv_tags"]; strings.Contains(tags, "zero-from") {
			t.Errorf("a zero tag is left after the retried Create: %s", tags)
		}
	})
}
