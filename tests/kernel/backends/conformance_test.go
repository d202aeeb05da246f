//go:build kernel

package backends

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// opTimeout bounds every backend call of the suite; TCG emulation makes a
// zfs list take a second.
const opTimeout = 2 * time.Minute

// store is one kind of store under test.
type store struct {
	name string // capture directory: zfs-thick, zfs-sparse, lvm-linear, lvm-thin
	unit int64  // allocation unit: volblocksize or extent size
	thin bool
	// size is more than the store can ever hold.
	tooBig int64
	// backend returns the store's backend running commands through r.
	backend func(r command.InputRunner) backends.Backend
	// missing returns a backend of a store that does not exist.
	missing func(r command.InputRunner) backends.Backend
	// foreign creates a volume of the store's kind named name, without an
	// ownership mark, with the raw tools; exists tells whether it is still
	// there.
	foreign func(t *testing.T, name string, size int64)
	exists  func(t *testing.T, name string) bool
	// settle waits until the store's free space stops changing (ZFS frees
	// destroyed blocks in the background); nil if it never changes by
	// itself.
	settle func(t *testing.T)
	rec    *recorder
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
	var be *backends.Error
	if !errors.As(err, &be) {
		t.Fatalf("error %v (%T) is not a *backends.Error", err, err)
	}
}

func deviceSize(t *testing.T, dev string) int64 {
	t.Helper()
	fi, err := os.Stat(dev)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		t.Fatalf("%s is %v, not a block device", dev, fi.Mode())
	}
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatalf("size of %s: %v", dev, err)
	}
	return n
}

// conformance runs the scenario every backend must pass. The steps share
// the store and run in order.
func conformance(t *testing.T, s *store) {
	b := s.backend(s.rec)
	const id = "pvc-conformance"
	size := 3*s.unit + 1
	rounded := 4 * s.unit

	t.Run("InvalidInputRunsNothing", func(t *testing.T) {
		before := s.rec.runs.Load()
		ctx := ctxT(t)
		_, err := b.Create(ctx, "Bad_ID", size)
		mustErr(t, err, backends.ErrInvalidArgument)
		_, err = b.Create(ctx, id, 0)
		mustErr(t, err, backends.ErrInvalidArgument)
		_, err = b.Create(ctx, id, -s.unit)
		mustErr(t, err, backends.ErrInvalidArgument)
		_, err = b.Expand(ctx, id, 0)
		mustErr(t, err, backends.ErrInvalidArgument)
		_, err = b.Create(ctx, strings.Repeat("a", backends.MaxVolumeIDLength+1), size)
		mustErr(t, err, backends.ErrInvalidArgument)
		mustErr(t, b.Delete(ctx, "-x"), backends.ErrInvalidArgument)
		if n := s.rec.runs.Load() - before; n != 0 {
			t.Fatalf("%d commands ran for invalid input", n)
		}
	})

	var capBefore *backends.Capacity
	t.Run("CapacityBefore", func(t *testing.T) {
		s.rec.step("capacity")
		var err error
		if capBefore, err = b.Capacity(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if capBefore.TotalBytes <= 0 || capBefore.AvailableBytes <= 0 || capBefore.AvailableBytes > capBefore.TotalBytes {
			t.Fatalf("capacity %+v of an empty store", *capBefore)
		}
	})

	t.Run("Create", func(t *testing.T) {
		s.rec.step("create")
		v, err := b.Create(ctxT(t), id, size)
		if err != nil {
			t.Fatal(err)
		}
		if v.ID != id || v.SizeBytes != rounded || v.Thin != s.thin {
			t.Fatalf("created %+v, want ID %s, %d bytes (%d rounded up to %d), thin %v", *v, id, rounded, size, s.unit, s.thin)
		}
		s.rec.step("get")
		g, err := b.Get(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if *g != *v {
			t.Fatalf("Get = %+v, Create returned %+v", *g, *v)
		}
	})

	t.Run("DevicePath", func(t *testing.T) {
		s.rec.step("device-path")
		dev, err := b.DevicePath(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if got := deviceSize(t, dev); got != rounded {
			t.Fatalf("%s has %d bytes, the volume %d", dev, got, rounded)
		}
		s.rec.step("")
		again, err := b.DevicePath(ctxT(t), id)
		if err != nil || again != dev {
			t.Fatalf("DevicePath again = %q, %v; first %q", again, err, dev)
		}
		t.Logf("device %s", dev)
	})

	t.Run("CreateIsIdempotent", func(t *testing.T) {
		s.rec.step("create-again")
		v, err := b.Create(ctxT(t), id, size)
		if err != nil || v.SizeBytes != rounded {
			t.Fatalf("Create again = %+v, %v; want success with %d bytes", v, err, rounded)
		}
		s.rec.step("create-other-size")
		_, err = b.Create(ctxT(t), id, rounded+s.unit)
		mustErr(t, err, backends.ErrConflict)
	})

	t.Run("CapacityAfter", func(t *testing.T) {
		s.rec.step("")
		c, err := b.Capacity(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		took := capBefore.AvailableBytes - c.AvailableBytes
		// A thick volume takes its size plus metadata (a zvol's
		// refreservation covers its indirect blocks). A thin one is
		// promised its size; ZFS's own accounting of the new zvol's few
		// written blocks moves the figure by a little.
		if (!s.thin && took < rounded) || (s.thin && (took < rounded-mib || took > rounded+mib)) {
			t.Fatalf("available went from %d to %d (-%d) for a %d-byte volume", capBefore.AvailableBytes, c.AvailableBytes, took, rounded)
		}
		t.Logf("available %d -> %d for %d bytes", capBefore.AvailableBytes, c.AvailableBytes, rounded)
	})

	t.Run("Expand", func(t *testing.T) {
		s.rec.step("expand")
		want := 6 * s.unit
		v, err := b.Expand(ctxT(t), id, 5*s.unit+1)
		if err != nil || v.SizeBytes != want {
			t.Fatalf("Expand = %+v, %v; want %d bytes", v, err, want)
		}
		s.rec.step("")
		dev, err := b.DevicePath(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if got := deviceSize(t, dev); got != want {
			t.Fatalf("%s has %d bytes after expansion to %d", dev, got, want)
		}
		s.rec.step("expand-same")
		if v, err := b.Expand(ctxT(t), id, want); err != nil || v.SizeBytes != want {
			t.Fatalf("Expand to the same size = %+v, %v", v, err)
		}
		s.rec.step("expand-shrink")
		_, err = b.Expand(ctxT(t), id, want-s.unit)
		mustErr(t, err, backends.ErrShrink)
		s.rec.step("")
		if got := deviceSize(t, dev); got != want {
			t.Fatalf("%s has %d bytes after a refused shrink, want %d", dev, got, want)
		}
	})

	t.Run("ListOnlyOwned", func(t *testing.T) {
		s.rec.step("")
		s.foreign(t, "foreign", 2*s.unit)
		s.rec.step("list")
		vs, err := b.List(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 1 || vs[0].ID != id {
			t.Fatalf("List = %+v, want only %s", vs, id)
		}
		s.rec.step("get-foreign")
		_, err = b.Get(ctxT(t), "foreign")
		mustErr(t, err, backends.ErrConflict)
		s.rec.step("create-foreign")
		_, err = b.Create(ctxT(t), "foreign", 2*s.unit)
		mustErr(t, err, backends.ErrConflict)
		s.rec.step("delete-foreign")
		mustErr(t, b.Delete(ctxT(t), "foreign"), backends.ErrConflict)
		s.rec.step("expand-foreign")
		_, err = b.Expand(ctxT(t), "foreign", 3*s.unit)
		mustErr(t, err, backends.ErrConflict)
		if !s.exists(t, "foreign") {
			t.Fatal("the unowned volume is gone")
		}
	})

	t.Run("DeleteBusyThenDelete", func(t *testing.T) {
		s.rec.step("")
		dev, err := b.DevicePath(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(dev)
		if err != nil {
			t.Fatal(err)
		}
		s.rec.step("delete-busy")
		err = b.Delete(ctxT(t), id)
		f.Close()
		mustErr(t, err, backends.ErrBusy)
		s.rec.step("delete")
		if err := b.Delete(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		s.rec.step("get-missing")
		_, err = b.Get(ctxT(t), id)
		mustErr(t, err, backends.ErrNotFound)
		s.rec.step("delete-missing")
		if err := b.Delete(ctxT(t), id); err != nil {
			t.Fatalf("Delete of a deleted volume: %v", err)
		}
		s.rec.step("expand-missing")
		_, err = b.Expand(ctxT(t), id, 8*s.unit)
		mustErr(t, err, backends.ErrNotFound)
	})

	t.Run("NoSpace", func(t *testing.T) {
		s.rec.step("create-too-big")
		_, err := b.Create(ctxT(t), "pvc-huge", s.tooBig)
		mustErr(t, err, backends.ErrNoSpace)
		s.rec.step("")
		if _, err := b.Get(ctxT(t), "pvc-huge"); !backends.IsNotFound(err) {
			t.Fatalf("after a refused create: Get = %v, want not found", err)
		}
		v, err := b.Create(ctxT(t), "pvc-small", s.unit)
		if err != nil {
			t.Fatal(err)
		}
		s.rec.step("expand-too-big")
		_, err = b.Expand(ctxT(t), v.ID, s.tooBig)
		mustErr(t, err, backends.ErrNoSpace)
		s.rec.step("")
		if err := b.Delete(ctxT(t), v.ID); err != nil {
			t.Fatal(err)
		}
	})

	if s.thin {
		t.Run("ThinAdmissionMatchesCapacity", func(t *testing.T) {
			c := settledCapacity(t, s, b)
			fill := c.AvailableBytes / s.unit * s.unit
			// Exactly what Capacity offers fits; one unit more does not.
			s.rec.step("create-over-available")
			_, err := b.Create(ctxT(t), "pvc-over", fill+s.unit)
			mustErr(t, err, backends.ErrNoSpace)
			s.rec.step("")
			if _, err := b.Create(ctxT(t), "pvc-fill", fill); err != nil {
				t.Fatalf("creating the %d bytes Capacity reported available: %v", fill, err)
			}
			// A failure below leaves no volume behind for the next test.
			t.Cleanup(func() { b.Delete(context.Background(), "pvc-fill") })
			c2, err := b.Capacity(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if c2.AvailableBytes >= s.unit {
				t.Fatalf("after filling %d of %d bytes available, %d bytes still available (unit %d)", fill, c.AvailableBytes, c2.AvailableBytes, s.unit)
			}
			_, err = b.Create(ctxT(t), "pvc-one-more", s.unit)
			mustErr(t, err, backends.ErrNoSpace)
			if err := b.Delete(ctxT(t), "pvc-fill"); err != nil {
				t.Fatal(err)
			}
		})

		// A burst of creates shares the listings it is admitted on, and
		// still admits no more than the store holds: of nine at once,
		// each a sixth of what Capacity offers, at most six are made.
		t.Run("BurstAdmitsWhatFits", func(t *testing.T) {
			c := settledCapacity(t, s, b)
			const fit, n = 6, 9
			size := c.AvailableBytes / fit / s.unit * s.unit
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("pvc-burst-%d", i)
			}
			var mu sync.Mutex
			var made []string
			var wg sync.WaitGroup
			for _, id := range ids {
				wg.Go(func() {
					_, err := b.Create(ctxT(t), id, size)
					switch {
					case err == nil:
						mu.Lock()
						made = append(made, id)
						mu.Unlock()
					case !backends.IsNoSpace(err):
						t.Errorf("Create %s: %v", id, err)
					}
				})
			}
			wg.Wait()
			t.Logf("%d of %d creates of %d bytes at once admitted, %d bytes available before", len(made), n, size, c.AvailableBytes)
			if len(made) > fit || len(made) < fit-1 {
				// One fewer is the admission erring on the safe side: a
				// command that has ended but not yet given back its
				// reservation is counted twice, and ZFS's own metadata
				// takes a little.
				t.Errorf("%d creates admitted, want %d or one fewer", len(made), fit)
			}
			parallel(t, made, func(ctx context.Context, id string) error { return b.Delete(ctx, id) })
		})
	}

	t.Run("ConcurrentCreatesAndDeletes", func(t *testing.T) {
		s.rec.step("")
		const n = 4
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("pvc-conc-%d", i)
		}
		parallel(t, ids, func(ctx context.Context, id string) error {
			v, err := b.Create(ctx, id, 2*s.unit)
			if err == nil && v.SizeBytes != 2*s.unit {
				err = fmt.Errorf("created %+v", *v)
			}
			return err
		})
		vs, err := b.List(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, v := range vs {
			got = append(got, v.ID)
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("List = %q, want %q", got, ids)
		}
		devs := map[string]string{}
		for _, id := range ids {
			dev, err := b.DevicePath(ctxT(t), id)
			if err != nil {
				t.Fatal(err)
			}
			if got := deviceSize(t, dev); got != 2*s.unit {
				t.Fatalf("%s of %s has %d bytes, want %d", dev, id, got, 2*s.unit)
			}
			devs[id] = dev
		}
		// Every node exists now: List names each volume's.
		if vs, err = b.List(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if v.DevicePath != devs[v.ID] {
				t.Errorf("List reports %s on %q, DevicePath %q", v.ID, v.DevicePath, devs[v.ID])
			}
		}
		parallel(t, ids, func(ctx context.Context, id string) error { return b.Delete(ctx, id) })
		if vs, err := b.List(ctxT(t)); err != nil || len(vs) != 0 {
			t.Fatalf("List after deleting all = %+v, %v", vs, err)
		}
	})

	t.Run("LongestID", func(t *testing.T) {
		s.rec.step("")
		long := strings.Repeat("l", backends.MaxVolumeIDLength-3) + "-ok"
		if _, err := b.Create(ctxT(t), long, s.unit); err != nil {
			t.Fatal(err)
		}
		vs, err := b.List(ctxT(t))
		if err != nil || len(vs) != 1 || vs[0].ID != long {
			t.Fatalf("List = %+v, %v; want the long ID", vs, err)
		}
		dev, err := b.DevicePath(ctxT(t), long)
		if err != nil {
			t.Fatal(err)
		}
		deviceSize(t, dev)
		if err := b.Delete(ctxT(t), long); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("MissingStore", func(t *testing.T) {
		m := s.missing(s.rec)
		ctx := ctxT(t)
		s.rec.step("missing-create")
		_, err := m.Create(ctx, id, size)
		mustErr(t, err, backends.ErrStoreNotFound)
		s.rec.step("missing-get")
		_, err = m.Get(ctx, id)
		mustErr(t, err, backends.ErrStoreNotFound)
		s.rec.step("missing-delete")
		mustErr(t, m.Delete(ctx, id), backends.ErrStoreNotFound)
		s.rec.step("missing-capacity")
		_, err = m.Capacity(ctx)
		mustErr(t, err, backends.ErrStoreNotFound)
		s.rec.step("missing-list")
		_, err = m.List(ctx)
		mustErr(t, err, backends.ErrStoreNotFound)
		s.rec.step("")
	})
}

// parallel runs f for every id at once and fails the test with every
// error.
// settledCapacity returns b's capacity once the store's free space has
// settled, recording no capture.
func settledCapacity(t *testing.T, s *store, b backends.Backend) *backends.Capacity {
	t.Helper()
	s.rec.step("")
	if s.settle != nil {
		s.settle(t)
	}
	c, err := b.Capacity(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func parallel(t *testing.T, ids []string, f func(context.Context, string) error) {
	t.Helper()
	ctx := ctxT(t)
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = f(ctx, id) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
