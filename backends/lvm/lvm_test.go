package lvm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
	"github.com/pillar-csi/pillar-csi/backends/internal/replaytest"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
)

// The captures under testdata/ were recorded by tests/kernel/backends in
// the kernel lab (LVM 2.03.16), with the fixture's random volume group name
// replaced by "vg0" (a group of 1 GiB with a thin pool "thinpool" of
// 256 MiB); the calls below are the suite's calls, in its order.

const (
	extent = 4 << 20
	id     = "pvc-conformance"
	dmPath = "/dev/mapper/vg0-pvc--conformance"
)

func newBackend(thinPool string, node func(string, int64, int64) error) replaytest.NewBackend {
	return func(t *testing.T, missing bool, r command.InputRunner) backends.Backend {
		vg := "vg0"
		if missing {
			vg = "pillarnovg"
		}
		b, err := lvm.New(lvm.Config{VolumeGroup: vg, ThinPool: thinPool, Runner: r})
		if err != nil {
			t.Fatal(err)
		}
		if node != nil {
			lvm.SetCheckNode(b, node)
		}
		return b
	}
}

// nodeOK accepts the node of the conformance volume (254:3 linear, 254:4
// thin in the captures).
func nodeOK(path string, major, minor int64) error {
	if path != dmPath || major != 254 || (minor != 3 && minor != 4) {
		return errors.New("unexpected node")
	}
	return nil
}

func common(thin bool) []replaytest.Case {
	vol := func(size int64) *backends.Volume {
		return &backends.Volume{ID: id, Name: "vg0/" + id, SizeBytes: size, Thin: thin, DevicePath: dmPath}
	}
	return []replaytest.Case{
		// 3 extents and a byte round up to 4 extents.
		{Label: "create", Call: replaytest.Create(id, 3*extent+1), Want: vol(4 * extent)},
		{Label: "get", Call: replaytest.Get(id), Want: vol(4 * extent)},
		{Label: "device-path", Call: replaytest.DevicePath(id), Want: dmPath},
		{Label: "create-again", Call: replaytest.Create(id, 3*extent+1), Want: vol(4 * extent)},
		{Label: "create-other-size", Call: replaytest.Create(id, 5*extent), Err: backends.ErrConflict},
		{Label: "expand", Call: replaytest.Expand(id, 5*extent+1), Want: vol(6 * extent)},
		{Label: "expand-same", Call: replaytest.Expand(id, 6*extent), Want: vol(6 * extent)},
		{Label: "expand-shrink", Call: replaytest.Expand(id, 5*extent), Err: backends.ErrShrink},
		// "foreign" (untagged) and the thin pool are left out.
		{Label: "list", Call: replaytest.List, Want: []backends.Volume{*vol(6 * extent)}},
		{Label: "get-foreign", Call: replaytest.Get("foreign"), Err: backends.ErrConflict},
		{Label: "create-foreign", Call: replaytest.Create("foreign", 2*extent), Err: backends.ErrConflict},
		{Label: "delete-foreign", Call: replaytest.Delete("foreign"), Err: backends.ErrConflict},
		{Label: "expand-foreign", Call: replaytest.Expand("foreign", 3*extent), Err: backends.ErrConflict},
		// "Logical volume vg0/pvc-conformance in use."
		{Label: "delete-busy", Call: replaytest.Delete(id), Err: backends.ErrBusy},
		{Label: "delete", Call: replaytest.Delete(id), Want: nil},
		// "Failed to find logical volume": the group is there.
		{Label: "get-missing", Call: replaytest.Get(id), Err: backends.ErrNotFound},
		{Label: "delete-missing", Call: replaytest.Delete(id), Want: nil},
		{Label: "expand-missing", Call: replaytest.Expand(id, 8*extent), Err: backends.ErrNotFound},
		{Label: "create-too-big", Call: replaytest.Create("pvc-huge", 2<<30), Err: backends.ErrNoSpace},
		{Label: "expand-too-big", Call: replaytest.Expand("pvc-small", 2<<30), Err: backends.ErrNoSpace},
		// 'Volume group "pillarnovg" not found'.
		{Label: "missing-create", Missing: true, Call: replaytest.Create(id, 3*extent+1), Err: backends.ErrStoreNotFound},
		{Label: "missing-get", Missing: true, Call: replaytest.Get(id), Err: backends.ErrStoreNotFound},
		{Label: "missing-delete", Missing: true, Call: replaytest.Delete(id), Err: backends.ErrStoreNotFound},
		{Label: "missing-capacity", Missing: true, Call: replaytest.Capacity, Err: backends.ErrStoreNotFound},
		{Label: "missing-list", Missing: true, Call: replaytest.List, Err: backends.ErrStoreNotFound},
	}
}

func TestLinearReplay(t *testing.T) {
	cases := append(common(false),
		// vgs: 1069547520 bytes, 792723456 free (the thin pool takes the
		// rest).
		replaytest.Case{Label: "capacity", Call: replaytest.Capacity,
			Want: &backends.Capacity{TotalBytes: 1069547520, AvailableBytes: 792723456}},
	)
	replaytest.Run(t, "testdata/lvm-linear", newBackend("", nodeOK), cases)
}

func TestThinReplay(t *testing.T) {
	cases := append(common(true),
		// An empty thin pool of 256 MiB: all of it may be promised.
		replaytest.Case{Label: "capacity", Call: replaytest.Capacity,
			Want: &backends.Capacity{TotalBytes: 256 << 20, AvailableBytes: 256 << 20}},
		// The 8 MiB "foreign" thin LV is promised too: 248 MiB are left.
		replaytest.Case{Label: "create-over-available", Call: replaytest.Create("pvc-over", 248<<20+extent), Err: backends.ErrNoSpace},
	)
	replaytest.Run(t, "testdata/lvm-thin", newBackend("thinpool", nodeOK), cases)
}

// TestZeroingReplay: the fixture's thin pool after lvchange --zero n
// (lv_attr twi-aot---, with the thin LV pvc-before in it) is refused by
// Create and Capacity at their one lvs, accepted with the opt-out, and
// accepted again after lvchange --zero y (twi-aotz--).
func TestZeroingReplay(t *testing.T) {
	allow := func(b backends.Backend) { lvm.AllowUnzeroedThinPool(b.(*lvm.Backend)) }
	// 256 MiB, of which pvc-before (8 MiB) is promised.
	avail := int64(248 << 20)
	replaytest.Run(t, "testdata/lvm-zero", newBackend("thinpool", nil), []replaytest.Case{
		{Label: "create-not-zeroing", Call: replaytest.Create("pvc-refused", 2*extent), Err: backends.ErrThinPoolNotZeroing},
		{Label: "capacity-not-zeroing", Call: replaytest.Capacity, Err: backends.ErrThinPoolNotZeroing},
		{Label: "capacity-allowed", Setup: allow, Call: replaytest.Capacity,
			Want: &backends.Capacity{TotalBytes: 256 << 20, AvailableBytes: avail}},
		{Label: "create-allowed", Setup: allow, Call: replaytest.Create("pvc-allowed", 2*extent),
			Want: &backends.Volume{ID: "pvc-allowed", Name: "vg0/pvc-allowed", SizeBytes: 2 * extent, Thin: true, DevicePath: "/dev/mapper/vg0-pvc--allowed"}},
		// pvc-allowed is promised too.
		{Label: "capacity-zeroing", Call: replaytest.Capacity,
			Want: &backends.Capacity{TotalBytes: 256 << 20, AvailableBytes: avail - 2*extent}},
	})
}

func TestDeviceReplay(t *testing.T) {
	const node = "/dev/mapper/vg0-pvc--node"
	present := func(path string, major, minor int64) error {
		if path != node || major != 254 || minor != 4 {
			return errors.New("unexpected node")
		}
		return nil
	}
	var checks int
	lost := func(path string, major, minor int64) error {
		if checks++; checks == 1 {
			return errors.New("no such file")
		}
		return present(path, major, minor)
	}
	setNode := func(f func(string, int64, int64) error) func(backends.Backend) {
		return func(b backends.Backend) { lvm.SetCheckNode(b.(*lvm.Backend), f) }
	}
	replaytest.Run(t, "testdata/lvm-device", newBackend("thinpool", nil), []replaytest.Case{
		{Label: "device-path", Setup: setNode(present), Call: replaytest.DevicePath("pvc-node"), Want: node},
		// Inactive (lv_kernel_major -1): lvchange --activate y, then lvs
		// again.
		{Label: "device-path-inactive", Setup: setNode(present), Call: replaytest.DevicePath("pvc-node"), Want: node},
		// The node was removed: the first check fails, vgmknodes makes it.
		{Label: "device-path-lost-node", Setup: setNode(lost), Call: replaytest.DevicePath("pvc-node"), Want: node},
	})
}

// TestThinCreatesListEveryTime: every thin create lists the volume group
// afresh, because the same listing says whether the pool zeroes new
// chunks, which an operator can change at any moment (lvchange --zero n);
// unlike ZFS's sparse admission, it is never taken from an earlier
// listing.
func TestThinCreatesListEveryTime(t *testing.T) {
	// The listing of an empty thin pool of 256 MiB with 4 MiB extents.
	listing := commandtest.Load(t, "testdata/lvm-thin/create.1.txt")
	unzeroed := listing
	unzeroed.Stdout = strings.Replace(listing.Stdout, `"twi-a-tz--"`, `"twi-a-t---"`, 1)
	create := commandtest.Load(t, "testdata/lvm-thin/create.2.txt")
	createOf := func(vol string) commandtest.Step {
		return create.WithArgs(map[string]string{id: vol, lvm.TagPrefix + id: lvm.TagPrefix + vol})
	}
	r := commandtest.New(t, listing, createOf("a"), unzeroed, listing, createOf("c"))
	b, err := lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thinpool", Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id  string
		err error
	}{
		{"a", nil},
		{"b", backends.ErrThinPoolNotZeroing},
		{"c", nil},
	} {
		if _, err := b.Create(context.Background(), c.id, 16<<20); !errors.Is(err, c.err) {
			t.Fatalf("Create %s: %v, want %v", c.id, err, c.err)
		}
	}
}

// TestDevicePathRemembered: a second DevicePath of a volume whose node is
// still there with the device numbers lvs gave runs no command; once the
// node is gone (the LV deactivated behind the backend's back), it lists
// the LV again.
func TestDevicePathRemembered(t *testing.T) {
	const node = "/dev/mapper/vg0-pvc--node"
	steps := commandtest.Captures(t, "testdata/lvm-device/device-path")
	r := commandtest.New(t, append(steps, steps...)...)
	b, err := lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thinpool", Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	gone := false
	lvm.SetCheckNode(b, func(path string, major, minor int64) error {
		if gone || path != node || major != 254 || minor != 4 {
			gone = false // lvs is asked next, and finds it again
			return errors.New("no such node")
		}
		return nil
	})
	ctx := context.Background()
	for range 3 {
		if dev, err := b.DevicePath(ctx, "pvc-node"); err != nil || dev != node {
			t.Fatalf("DevicePath: %q, %v; want %s", dev, err, node)
		}
	}
	if n := len(r.Calls()); n != len(steps) {
		t.Fatalf("three DevicePath calls ran %d commands, want the first's %d: %q", n, len(steps), r.Calls())
	}
	gone = true
	if dev, err := b.DevicePath(ctx, "pvc-node"); err != nil || dev != node {
		t.Fatalf("DevicePath after the node went: %q, %v; want %s", dev, err, node)
	}
	if n := len(r.Calls()); n != 2*len(steps) {
		t.Fatalf("DevicePath after the node went ran %d commands in all, want %d (lvs again)", n, 2*len(steps))
	}
}

// TestDevicePathAfterCreate: the node lvcreate made is remembered with its
// device numbers, so the look-up of a new volume's device (its export's)
// runs no lvs.
func TestDevicePathAfterCreate(t *testing.T) {
	steps := commandtest.Captures(t, "testdata/lvm-thin/create")
	r := commandtest.New(t, steps...)
	b, err := lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thinpool", Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	lvm.SetBlockNode(b, func(path string) (int64, int64, error) {
		if path != dmPath {
			return 0, 0, errors.New("no such node")
		}
		return 254, 4, nil
	})
	lvm.SetCheckNode(b, nodeOK)
	ctx := context.Background()
	if _, err := b.Create(ctx, id, 3*extent+1); err != nil {
		t.Fatal(err)
	}
	if dev, err := b.DevicePath(ctx, id); err != nil || dev != dmPath {
		t.Fatalf("DevicePath after Create: %q, %v; want %s", dev, err, dmPath)
	}
	if n := len(r.Calls()); n != len(steps) {
		t.Fatalf("Create and DevicePath ran %q, want the create's %d commands only", r.Calls(), len(steps))
	}
}
