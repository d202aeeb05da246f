package zfs

import (
	"os"
	"testing"
	"time"
)

// fakeZvols is a /sys/block of zvol devices: node → diskseq and dataset
// name, counting how often each node is opened to be asked its name.
type fakeZvols struct {
	devs  map[string]zdev
	asked map[string]int
}

func newFakeZvols(devs ...zdev) *fakeZvols {
	f := &fakeZvols{devs: map[string]zdev{}, asked: map[string]int{}}
	for _, d := range devs {
		f.devs[d.dev] = d
	}
	return f
}

func (f *fakeZvols) scan() ([]zdev, error) {
	var out []zdev
	for _, d := range f.devs {
		out = append(out, zdev{dev: d.dev, seq: d.seq})
	}
	return out, nil
}

func (f *fakeZvols) ask(dev string) (string, error) {
	f.asked[dev]++
	d, ok := f.devs[dev]
	if !ok {
		return "", os.ErrNotExist
	}
	return d.name, nil
}

func (f *fakeZvols) totalAsked() int {
	n := 0
	for _, v := range f.asked {
		n += v
	}
	return n
}

func mustDevice(t *testing.T, x *zvolIndex, name, want string) {
	t.Helper()
	dev, ok, err := x.device(name)
	if err != nil || !ok || dev != want {
		t.Fatalf("device(%q) = %q, %v, %v; want %q", name, dev, ok, err, want)
	}
}

// TestZvolIndexAsksEachDeviceOnce: after the first scan, a lookup opens
// only the device it returns, and a listing opens none.
func TestZvolIndexAsksEachDeviceOnce(t *testing.T) {
	f := newFakeZvols(
		zdev{dev: "/dev/zd0", seq: "7", name: "tank/a"},
		zdev{dev: "/dev/zd16", seq: "8", name: "tank/b"},
		zdev{dev: "/dev/zd32", seq: "9", name: "tank/c"},
	)
	x := newZvolIndex(f.scan, f.ask)
	mustDevice(t, x, "tank/b", "/dev/zd16")
	if n := f.totalAsked(); n != 3 {
		t.Fatalf("the first lookup opened %d devices, want 3 (each once)", n)
	}
	mustDevice(t, x, "tank/c", "/dev/zd32")
	if f.asked["/dev/zd32"] != 2 || f.totalAsked() != 4 {
		t.Fatalf("the second lookup opened %v; want only the device it returns, once", f.asked)
	}
	devs, err := x.devices()
	if err != nil || len(devs) != 3 || devs["tank/a"] != "/dev/zd0" {
		t.Fatalf("devices() = %v, %v", devs, err)
	}
	if f.totalAsked() != 4 {
		t.Fatalf("a listing opened devices: %v", f.asked)
	}
}

// TestZvolIndexNewDiskSeq: a node destroyed and made again for another
// zvol (same zdN, new diskseq) is asked again, and the old zvol's name
// no longer finds it.
func TestZvolIndexNewDiskSeq(t *testing.T) {
	f := newFakeZvols(zdev{dev: "/dev/zd0", seq: "7", name: "tank/a"})
	x := newZvolIndex(f.scan, f.ask)
	mustDevice(t, x, "tank/a", "/dev/zd0")
	f.devs["/dev/zd0"] = zdev{dev: "/dev/zd0", seq: "12", name: "tank/b"}
	mustDevice(t, x, "tank/b", "/dev/zd0")
	if _, ok, err := x.device("tank/a"); ok || err != nil {
		t.Fatalf("device(tank/a) found after its node was made for tank/b (%v)", err)
	}
}

// TestZvolIndexGone: a device that disappears is forgotten, and a device
// whose open fails (being removed) is not listed.
func TestZvolIndexGone(t *testing.T) {
	f := newFakeZvols(zdev{dev: "/dev/zd0", seq: "7", name: "tank/a"}, zdev{dev: "/dev/zd16", seq: "8", name: "tank/b"})
	x := newZvolIndex(f.scan, f.ask)
	mustDevice(t, x, "tank/a", "/dev/zd0")
	delete(f.devs, "/dev/zd0")
	if _, ok, _ := x.device("tank/a"); ok {
		t.Fatal("device(tank/a) found after its node was removed")
	}
	if devs, _ := x.devices(); len(devs) != 1 || devs["tank/b"] != "/dev/zd16" {
		t.Fatalf("devices() = %v, want only tank/b", devs)
	}
}

// TestZvolIndexNoDiskSeq: without a diskseq (kernels before 5.15) every
// scan asks every device, as there is no telling a node made again.
func TestZvolIndexNoDiskSeq(t *testing.T) {
	f := newFakeZvols(zdev{dev: "/dev/zd0", name: "tank/a"}, zdev{dev: "/dev/zd16", name: "tank/b"})
	x := newZvolIndex(f.scan, f.ask)
	for range 3 {
		if _, err := x.devices(); err != nil {
			t.Fatal(err)
		}
	}
	if f.asked["/dev/zd0"] != 3 || f.asked["/dev/zd16"] != 3 {
		t.Fatalf("asked %v, want each device on each of 3 scans", f.asked)
	}
}

// TestZvolIndexRenamed: a zvol renamed under its node keeps the node's
// diskseq. A lookup of the old name confirms the remembered answer, finds
// it wrong and does not return it; a lookup of the new name asks every
// device again once rescanEvery has passed since the last full scan.
func TestZvolIndexRenamed(t *testing.T) {
	f := newFakeZvols(zdev{dev: "/dev/zd0", seq: "7", name: "tank/a"}, zdev{dev: "/dev/zd16", seq: "8", name: "tank/x"})
	x := newZvolIndex(f.scan, f.ask)
	mustDevice(t, x, "tank/a", "/dev/zd0")
	f.devs["/dev/zd16"] = zdev{dev: "/dev/zd16", seq: "8", name: "tank/y"}
	if _, ok, err := x.device("tank/y"); ok || err != nil {
		t.Fatalf("device(tank/y) found before a full scan was due (%v)", err)
	}
	x.lastFull = time.Now().Add(-rescanEvery)
	mustDevice(t, x, "tank/y", "/dev/zd16")
	if _, ok, err := x.device("tank/x"); ok || err != nil {
		t.Fatalf("device(tank/x) found after the rename (%v)", err)
	}

	// Renamed away, with no full scan due: the remembered answer is
	// confirmed before it is returned.
	f.devs["/dev/zd0"] = zdev{dev: "/dev/zd0", seq: "7", name: "tank/z"}
	x.lastFull = time.Now()
	if err := x.refresh(false); err != nil { // the next lookup's answer comes from memory
		t.Fatal(err)
	}
	if _, ok, err := x.device("tank/a"); ok || err != nil {
		t.Fatalf("device(tank/a) returned a node renamed to tank/z (%v)", err)
	}
}
