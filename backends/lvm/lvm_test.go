package lvm_test

import (
	"context"
	"errors"
	"slices"
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

// TestGetsAtOnceShareAReport: Gets made while a report runs are answered
// together by the next one, a single lvs naming every LV; each gets its
// own answer from it: the volume, ErrNotFound for an LV lvs does not find,
// ErrConflict for an LV no volume owns.
func TestGetsAtOnceShareAReport(t *testing.T) {
	row := func(name, tags string) string {
		return `{"lv_name":"` + name + `", "lv_size":"8388608", "lv_tags":"` + tags + `", "lv_attr":"Vwi-a-tz--", "pool_lv":"thinpool", "lv_dm_path":"/dev/mapper/vg0-` + name + `", "lv_kernel_major":"253", "lv_kernel_minor":"3", "vg_extent_size":"4194304"}`
	}
	report := func(rows ...string) []byte {
		return []byte(`{"report": [{"lv": [` + strings.Join(rows, ",") + `]}]}`)
	}
	r := batchtest.NewHeld(func([]string) ([]byte, error) { return report(row("pvc-first", lvm.TagPrefix+"pvc-first")), nil }, func(argv []string) ([]byte, error) {
		return report(row("pvc-a", lvm.TagPrefix+"pvc-a"), row("pvc-b", lvm.TagPrefix+"pvc-b"), row("pvc-theirs", "")),
			commandtest.Exited(argv, 5, "  Failed to find logical volume \"vg0/pvc-gone\"\n")
	})
	b, err := lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thinpool", Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]error{"pvc-a": nil, "pvc-b": nil, "pvc-gone": backends.ErrNotFound, "pvc-theirs": backends.ErrConflict}
	batchtest.Shared(t, b, r, "pvc-first", 8388608, want, func() int { return lvm.WaitingLookups(b) })
	calls := r.Calls()
	if len(calls) != 2 || len(calls[1]) != 11+len(want) || !slices.Contains(calls[1], "vg0/pvc-gone") || !slices.Contains(calls[1], "vg0/pvc-a") {
		t.Fatalf("commands %q, want a report, then one lvs of the four LVs", calls)
	}
}

// fakeThinVG answers the lvs and lvcreate of one thin pool of poolSize
// bytes: a listing of the volume group shows the pool and every LV made
// so far, and the first listing waits for first to close.
type fakeThinVG struct {
	poolSize int64
	first    chan struct{}
	// made, when not nil, holds every lvcreate until it is closed; its
	// LV is in no listing before.
	made chan struct{}

	mu       sync.Mutex
	lvs      []string // names made by lvcreate, with their sizes
	sizes    map[string]string
	listings int
	creates  int
}

func (f *fakeThinVG) run(_ context.Context, argv []string) ([]byte, error) {
	row := func(name, size, tags, attr, pool string) string {
		return `{"lv_name":"` + name + `", "lv_size":"` + size + `", "lv_tags":"` + tags + `", "lv_attr":"` + attr + `", "pool_lv":"` + pool +
			`", "lv_dm_path":"/dev/mapper/vg0-` + name + `", "lv_kernel_major":"254", "lv_kernel_minor":"2", "vg_extent_size":"4194304"}`
	}
	switch {
	case len(argv) > 1 && argv[1] == "lvs" && argv[len(argv)-1] == "vg0":
		f.mu.Lock()
		f.listings++
		n := f.listings
		rows := []string{row("thinpool", strconv.FormatInt(f.poolSize, 10), "", "twi-a-tz--", "")}
		for _, name := range f.lvs {
			rows = append(rows, row(name, f.sizes[name], lvm.TagPrefix+name, "Vwi-a-tz--", "thinpool"))
		}
		f.mu.Unlock()
		if n == 1 {
			<-f.first
		}
		return []byte(`{"report": [{"lv": [` + strings.Join(rows, ",") + `]}]}`), nil
	case len(argv) > 1 && argv[1] == "lvcreate":
		name, size := argv[slices.Index(argv, "--name")+1], argv[slices.Index(argv, "--virtualsize")+1]
		f.mu.Lock()
		f.creates++
		f.mu.Unlock()
		if f.made != nil {
			<-f.made
		}
		f.mu.Lock()
		f.lvs = append(f.lvs, name)
		f.sizes[name] = strings.TrimSuffix(size, "b")
		f.mu.Unlock()
		return nil, nil
	}
	return nil, commandtest.Exited(argv, 3, "unexpected command")
}

// TestThinCreatesShareAListing: thin creates asked for while the volume
// group is being listed for another are admitted on the next listing,
// begun after they were asked for, with what was admitted since counted
// against it: a burst lists twice, not once per create, and admits no
// more than the pool holds.
func TestThinCreatesShareAListing(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name         string
		creates      int
		admitted     int
		listingsMost int
	}{
		{"all fit", 7, 7, 2},
		// 64 MiB hold eight of 8 MiB; each refusal is checked on a
		// listing of its own.
		{"more than fit", 10, 8, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeThinVG{poolSize: 64 * mib, first: make(chan struct{}), made: make(chan struct{}), sizes: map[string]string{}}
			b, err := lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thinpool", Runner: commandtest.Func(f.run)})
			if err != nil {
				t.Fatal(err)
			}
			lvm.SetCheckNode(b, func(string, int64, int64) error { return nil })
			errc := make(chan error, c.creates)
			create := func(i int) {
				_, err := b.Create(context.Background(), "pvc-burst-"+strconv.Itoa(i), 8*mib)
				errc <- err
			}
			go create(0)
			batchtest.Await(t, "the first create's listing", func() bool {
				f.mu.Lock()
				defer f.mu.Unlock()
				return f.listings == 1
			})
			for i := 1; i < c.creates; i++ {
				go create(i)
			}
			// The others ask before the first listing ends: each has
			// read which listings had begun once it waits for the lock.
			batchtest.Await(t, "the other creates at the admission lock", func() bool { return lvm.WaitingAdmissions(b) == c.creates-1 })
			close(f.first)
			// Every lvcreate is held until each create is either in one
			// or has returned: a listing made meanwhile shows none of
			// the new LVs, so no admitted create counts twice (once in
			// the listing, once reserved), which would refuse one more
			// than the pool's size does.
			admitted, refused, returned := 0, 0, 0
			count := func(err error) {
				returned++
				switch {
				case err == nil:
					admitted++
				case errors.Is(err, backends.ErrNoSpace):
					refused++
				default:
					t.Errorf("Create: %v", err)
				}
			}
			for deadline := time.Now().Add(time.Minute); ; {
				f.mu.Lock()
				held := f.creates
				f.mu.Unlock()
				if held+returned == c.creates {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after a minute %d creates in lvcreate and %d returned, of %d", held, returned, c.creates)
				}
				select {
				case err := <-errc:
					count(err)
				case <-time.After(time.Millisecond):
				}
			}
			close(f.made)
			for returned < c.creates {
				count(<-errc)
			}
			if admitted != c.admitted || f.creates != c.admitted || admitted+refused != c.creates {
				t.Errorf("%d admitted, %d refused, %d lvcreate; want %d admitted", admitted, refused, f.creates, c.admitted)
			}
			if f.listings > c.listingsMost {
				t.Errorf("%d listings for %d creates, want at most %d", f.listings, c.creates, c.listingsMost)
			}
		})
	}
}

// TestThinCreateCountsWhatWasMadeAfterItsListing: a thin create that
// shares a listing made before another create's LV existed counts that
// LV once, through what the listing was told was taken since: it fits
// beside it or is refused, never admitted into space the LV took.
func TestThinCreateCountsWhatWasMadeAfterItsListing(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name     string
		size     int64
		admitted bool
		listings int
	}{
		// 64 MiB, 40 taken: 16 fit on the shared listing.
		{"fits beside it", 16 * mib, true, 1},
		// 40 do not; a refusal is checked on a listing of its own.
		{"does not fit", 40 * mib, false, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			first := make(chan struct{})
			close(first)
			f := &fakeThinVG{poolSize: 64 * mib, first: first, sizes: map[string]string{}}
			b, err := lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thinpool", Runner: commandtest.Func(f.run)})
			if err != nil {
				t.Fatal(err)
			}
			lvm.SetCheckNode(b, func(string, int64, int64) error { return nil })
			asked, goOn := make(chan struct{}), make(chan struct{})
			lvm.SetAfterAsked(b, func(name string) {
				if name == lvm.LVName("vg0", "pvc-late") {
					close(asked)
					<-goOn
				}
			})
			errc := make(chan error, 1)
			go func() {
				_, err := b.Create(context.Background(), "pvc-late", c.size)
				errc <- err
			}()
			// The late create has read that no listing had begun; the
			// early one lists, is admitted and made before it goes on.
			select {
			case <-asked:
			case <-time.After(time.Minute):
				t.Fatal("the late create did not ask within a minute")
			}
			if _, err := b.Create(context.Background(), "pvc-early", 40*mib); err != nil {
				t.Fatal(err)
			}
			close(goOn)
			select {
			case err = <-errc:
			case <-time.After(time.Minute):
				t.Fatal("the late create did not return within a minute")
			}
			switch {
			case c.admitted && err != nil:
				t.Errorf("Create: %v; want it admitted beside the 40 MiB LV", err)
			case !c.admitted && !errors.Is(err, backends.ErrNoSpace):
				t.Errorf("Create: %v; want it refused for lack of space (40 of 64 MiB taken)", err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.listings != c.listings {
				t.Errorf("%d listings, want %d", f.listings, c.listings)
			}
		})
	}
}
