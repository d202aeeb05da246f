package zfs_test

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
	"github.com/pillar-csi/pillar-csi/backends/internal/batch/batchtest"
	"github.com/pillar-csi/pillar-csi/backends/internal/replaytest"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
)

// The captures under testdata/zfs-thick and testdata/zfs-sparse were
// recorded by the conformance scenario of tests/kernel/backends in the
// kernel lab (ZFS 2.1.11), with the fixture's random pool name replaced by
// "tank"; the calls below are the scenario's calls, in its order.

const (
	unit   = zfs.DefaultVolBlockSize
	id     = "pvc-conformance"
	name   = "tank/pillar/vols/" + id
	parent = "pillar/vols"
)

func newBackend(sparse bool) replaytest.NewBackend {
	return func(t *testing.T, missing bool, r command.InputRunner) backends.Backend {
		pool := "tank"
		if missing {
			pool = "pillarnopool"
		}
		b, err := zfs.New(zfs.Config{Pool: pool, ParentDataset: parent, Sparse: sparse, Runner: r})
		if err != nil {
			t.Fatal(err)
		}
		zfs.SetZvolDevices(b, func() (map[string]string, error) {
			return map[string]string{name: "/dev/zd0", "tank/other": "/dev/zd16"}, nil
		})
		zfs.SetPoolImported(b, tankImported)
		zfs.SetBusyRetry(b, 0, 0)
		return b
	}
}

// tankImported is what the ZFS module's statistics tell in the kernel lab
// where the captures were made: tank is imported, no other pool is.
func tankImported(pool string) (imported, known bool) { return pool == "tank", true }

// TestDeleteRetriesBusy: a destroy that finds the zvol busy (the kernel
// holds a new or resized zvol open for a moment) is repeated, and the
// delete succeeds once the zvol is free.
func TestDeleteRetriesBusy(t *testing.T) {
	dir := filepath.Join("testdata", "zfs-sparse")
	steps := commandtest.Captures(t, filepath.Join(dir, "delete-busy"))
	ok := commandtest.Captures(t, filepath.Join(dir, "delete"))
	// A busy destroy (EBUSY from the channel program), then the
	// successful one.
	steps = append(steps, ok[len(ok)-1])
	r := commandtest.New(t, steps...)
	b, err := zfs.New(zfs.Config{Pool: "tank", ParentDataset: parent, Sparse: true, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	zfs.SetBusyRetry(b, 3, time.Millisecond)
	if err := b.Delete(context.Background(), id); err != nil {
		t.Fatalf("Delete after one busy destroy: %v", err)
	}
}

// common are the cases both kinds of store answer alike.
func common(thin bool) []replaytest.Case {
	vol := func(size int64) *backends.Volume {
		return &backends.Volume{ID: id, Name: name, SizeBytes: size, Thin: thin}
	}
	return []replaytest.Case{
		// 3 blocks and a byte round up to 4 blocks of 16 KiB. The parent
		// dataset does not exist yet: it is created and the create retried.
		{Label: "create", Call: replaytest.Create(id, 3*unit+1), Want: vol(4 * unit)},
		{Label: "get", Call: replaytest.Get(id), Want: vol(4 * unit)},
		{Label: "device-path", Call: replaytest.DevicePath(id), Want: "/dev/zd0"},
		// zfs create says "dataset already exists"; the zvol has the size.
		{Label: "create-again", Call: replaytest.Create(id, 3*unit+1), Want: vol(4 * unit)},
		{Label: "create-other-size", Call: replaytest.Create(id, 5*unit), Err: backends.ErrConflict},
		{Label: "expand", Call: replaytest.Expand(id, 5*unit+1), Want: vol(6 * unit)},
		{Label: "expand-same", Call: replaytest.Expand(id, 6*unit), Want: vol(6 * unit)},
		{Label: "expand-shrink", Call: replaytest.Expand(id, 5*unit), Err: backends.ErrShrink},
		// A thick zvol "foreign" without the owner property is left out.
		// List alone looks for the device nodes, once for all zvols.
		{Label: "list", Call: replaytest.List, Want: []backends.Volume{listed(vol(6*unit), "/dev/zd0")}},
		{Label: "get-foreign", Call: replaytest.Get("foreign"), Err: backends.ErrConflict},
		{Label: "create-foreign", Call: replaytest.Create("foreign", 2*unit), Err: backends.ErrConflict},
		{Label: "delete-foreign", Call: replaytest.Delete("foreign"), Err: backends.ErrConflict},
		{Label: "expand-foreign", Call: replaytest.Expand("foreign", 3*unit), Err: backends.ErrConflict},
		// The destroy fails with EBUSY while the device is open.
		{Label: "delete-busy", Call: replaytest.Delete(id), Err: backends.ErrBusy},
		{Label: "delete", Call: replaytest.Delete(id), Want: nil},
		// "dataset does not exist", and zpool confirms the pool is there;
		// the destroy program finds no dataset.
		{Label: "get-missing", Call: replaytest.Get(id), Err: backends.ErrNotFound},
		{Label: "delete-missing", Call: replaytest.Delete(id), Want: nil},
		{Label: "expand-missing", Call: replaytest.Expand(id, 8*unit), Err: backends.ErrNotFound},
		{Label: "create-too-big", Call: replaytest.Create("pvc-huge", 1<<30), Err: backends.ErrNoSpace},
		{Label: "expand-too-big", Call: replaytest.Expand("pvc-small", 1<<30), Err: backends.ErrNoSpace},
		// The pool does not exist: "no such pool" (zfs program among
		// them), or "dataset does not exist" from zfs and then "no such
		// pool" from zpool.
		{Label: "missing-create", Missing: true, Call: replaytest.Create(id, 3*unit+1), Err: backends.ErrStoreNotFound},
		{Label: "missing-get", Missing: true, Call: replaytest.Get(id), Err: backends.ErrStoreNotFound},
		{Label: "missing-delete", Missing: true, Call: replaytest.Delete(id), Err: backends.ErrStoreNotFound},
		{Label: "missing-capacity", Missing: true, Call: replaytest.Capacity, Err: backends.ErrStoreNotFound},
		{Label: "missing-list", Missing: true, Call: replaytest.List, Err: backends.ErrStoreNotFound},
	}
}

func TestThickReplay(t *testing.T) {
	cases := append(common(false),
		// An empty pool: the parent dataset does not exist yet, so the
		// pool's root gives the figures (used 113664, available
		// 368985088).
		replaytest.Case{Label: "capacity", Call: replaytest.Capacity,
			Want: &backends.Capacity{TotalBytes: 113664 + 368985088, AvailableBytes: 368985088}},
	)
	replaytest.Run(t, "testdata/zfs-thick", newBackend(false), cases)
}

func TestSparseReplay(t *testing.T) {
	cases := append(common(true),
		replaytest.Case{Label: "capacity", Call: replaytest.Capacity,
			Want: &backends.Capacity{TotalBytes: 109056 + 368989696, AvailableBytes: 368989696}},
		// The pool's parent dataset has 366744576 bytes available and
		// only a thick zvol in it: that much may be promised, no more.
		replaytest.Case{Label: "create-over-available", Call: replaytest.Create("pvc-over", 366744576+unit), Err: backends.ErrNoSpace},
	)
	replaytest.Run(t, "testdata/zfs-sparse", newBackend(true), cases)
}

// TestSparseCapacityRule applies the overcommit rule to a captured listing
// with one sparse zvol of 65536 bytes of which 12288 are written: it is
// promised the 53248 it may still take.
func TestSparseCapacityRule(t *testing.T) {
	// create-again.1 is the capacity listing of the sparse store with the
	// volume in it: the parent dataset has used 36864, available
	// 368863744.
	listing := commandtest.Load(t, "testdata/zfs-sparse/create-again.1.txt")
	for _, c := range []struct {
		ratio float64
		want  int64
	}{
		{1, 368863744 - (65536 - 12288)},
		{2, 2*(36864+368863744) - 36864 - (65536 - 12288)},
	} {
		b, err := zfs.New(zfs.Config{Pool: "tank", ParentDataset: parent, Sparse: true, OvercommitRatio: c.ratio,
			Runner: commandtest.New(t, listing)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Capacity(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if want := (backends.Capacity{TotalBytes: 36864 + 368863744, AvailableBytes: c.want}); *got != want {
			t.Errorf("ratio %g: capacity %+v, want %+v", c.ratio, *got, want)
		}
	}
}

// listed is v as List reports it, with its device node.
func listed(v *backends.Volume, dev string) backends.Volume {
	l := *v
	l.DevicePath = dev
	return l
}

// TestSparseCreatesShareAListing: sparse creates within AdmissionMaxAge of a
// capacity listing are admitted against its figure less what was admitted
// since, without listing again; a request that figure refuses, and the
// first request after AdmissionMaxAge, list again.
func TestSparseCreatesShareAListing(t *testing.T) {
	// The listing of an empty pool: 368989696 bytes available, no sparse
	// zvol, so as much may be promised.
	listing := commandtest.Load(t, "testdata/zfs-sparse/create.1.txt")
	const avail = 368989696
	create := commandtest.Load(t, "testdata/zfs-sparse/create.4.txt")
	// The captured create of id, for another volume and size.
	createOf := func(vol string, size int64) commandtest.Step {
		return create.WithArgs(map[string]string{"65536": strconv.FormatInt(size, 10),
			zfs.OwnerProperty + "=" + id: zfs.OwnerProperty + "=" + vol, name: "tank/" + parent + "/" + vol})
	}
	// More than the listing's figure less a and b, no more than the
	// figure itself.
	const big = avail / unit * unit
	r := commandtest.New(t,
		listing, createOf("a", 4*unit),
		createOf("b", 4*unit),
		listing, createOf("c", big),
		listing, createOf("d", 4*unit),
	)
	b, err := zfs.New(zfs.Config{Pool: "tank", ParentDataset: parent, Sparse: true, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	zfs.SetClock(b, func() time.Time { return now })
	for _, c := range []struct {
		id    string
		size  int64
		later time.Duration
	}{
		{"a", 4 * unit, 0},
		{"b", 4 * unit, zfs.AdmissionMaxAge - time.Second},
		{"c", big, 0},
		{"d", 4 * unit, zfs.AdmissionMaxAge},
	} {
		now = now.Add(c.later)
		if _, err := b.Create(context.Background(), c.id, c.size); err != nil {
			t.Fatalf("Create %s: %v", c.id, err)
		}
	}
	if big <= avail-8*unit {
		t.Fatalf("c (%d bytes) fits the figure less a and b: the test does not make it list again", big)
	}
}

// TestDeleteRefusesWhatItDoesNotOwn: the channel program's verdicts on a
// dataset that is not ours, or not deletable, become the backend's errors.
func TestDeleteRefusesWhatItDoesNotOwn(t *testing.T) {
	program := commandtest.Load(t, "testdata/zfs-sparse/delete.1.txt")
	for _, c := range []struct {
		verdict string
		want    error
	}{
		{"other\tfilesystem", backends.ErrConflict},
		{"foreign\tpvc-other", backends.ErrConflict},
		{"foreign\t", backends.ErrConflict},
		{"snapshots", backends.ErrBusy},
		{"failed\t16", backends.ErrBusy},
	} {
		s := program
		s.Stdout = `{"return":"` + strings.ReplaceAll(c.verdict, "\t", `\t`) + `"}` + "\n"
		b, err := zfs.New(zfs.Config{Pool: "tank", ParentDataset: parent, Sparse: true, Runner: commandtest.New(t, s)})
		if err != nil {
			t.Fatal(err)
		}
		zfs.SetBusyRetry(b, 0, 0)
		if err := b.Delete(context.Background(), id); !errors.Is(err, c.want) {
			t.Errorf("verdict %q: Delete = %v, want %v", c.verdict, err, c.want)
		}
	}
}

// TestDevicePathOfASeenVolume: the device node of a volume the backend has
// listed (or made) is found without listing the volume again; once the
// node is gone (the zvol destroyed behind the backend's back), DevicePath
// lists it to tell why, and after a Delete it lists again too.
func TestDevicePathOfASeenVolume(t *testing.T) {
	dir := filepath.Join("testdata", "zfs-sparse")
	get := commandtest.Captures(t, filepath.Join(dir, "get"))
	missing := commandtest.Captures(t, filepath.Join(dir, "get-missing"))
	r := commandtest.New(t, append(get, missing...)...)
	b, err := zfs.New(zfs.Config{Pool: "tank", ParentDataset: parent, Sparse: true, Runner: r, DeviceTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	devs := map[string]string{name: "/dev/zd0"}
	zfs.SetPoolImported(b, tankImported)
	zfs.SetZvolDevices(b, func() (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(devs), nil
	})
	ctx := context.Background()
	if _, err := b.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if dev, err := b.DevicePath(ctx, id); err != nil || dev != "/dev/zd0" {
			t.Fatalf("DevicePath of a listed volume: %q, %v; want /dev/zd0", dev, err)
		}
	}
	if n := len(r.Calls()); n != len(get) {
		t.Fatalf("%d commands after a Get and three DevicePath calls, want the Get's %d: %q", n, len(get), r.Calls())
	}
	mu.Lock()
	delete(devs, name)
	mu.Unlock()
	if _, err := b.DevicePath(ctx, id); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("DevicePath of a volume destroyed behind the backend's back: %v, want ErrNotFound", err)
	}
	if n := len(r.Calls()); n != len(get)+len(missing) {
		t.Fatalf("DevicePath ran %q, want the listing of get-missing", r.Calls()[len(get):])
	}
}

// TestGetsAtOnceShareAListing: Gets made while a listing runs are
// answered together by the next one, a single zfs list naming every
// zvol; each gets its own answer from it: the volume, ErrNotFound for a
// name zfs cannot open because it does not exist, ErrConflict for a
// dataset that is not a volume or a zvol another volume owns.
func TestGetsAtOnceShareAListing(t *testing.T) {
	row := func(vol, owner string) string {
		return "tank/pillar/vols/" + vol + "\t8388608\t16384\t0\tdefault\t" + owner + "\n"
	}
	r := batchtest.NewHeld(func([]string) ([]byte, error) { return []byte(row("pvc-first", "pvc-first")), nil }, func(argv []string) ([]byte, error) {
		// zfs lists what it can, in name order, and names each dataset it
		// cannot open on standard error.
		out := row("pvc-a", "pvc-a") + row("pvc-b", "pvc-b") + row("pvc-theirs", "pvc-other")
		return []byte(out), commandtest.Exited(argv, 1,
			"cannot open 'tank/pillar/vols/pvc-gone': dataset does not exist\n"+
				"cannot open 'tank/pillar/vols/pvc-fs': operation not applicable to datasets of this type\n")
	})
	b, err := zfs.New(zfs.Config{Pool: "tank", ParentDataset: parent, Sparse: true, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	zfs.SetPoolImported(b, tankImported)
	want := map[string]error{"pvc-a": nil, "pvc-b": nil, "pvc-gone": backends.ErrNotFound, "pvc-fs": backends.ErrConflict, "pvc-theirs": backends.ErrConflict}
	batchtest.Shared(t, b, r, "pvc-first", 8388608, want, func() int { return zfs.WaitingLookups(b) })
	calls := r.Calls()
	if len(calls) != 2 || len(calls[1]) != 7+len(want) || !strings.HasPrefix(strings.Join(calls[1], " "), "zfs list -Hp -t volume -o ") {
		t.Fatalf("commands %q, want a listing, then one zfs list of the five zvols", calls)
	}
}
