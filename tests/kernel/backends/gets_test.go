//go:build kernel

package backends

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// lookupCounter runs commands and keeps, for each look-up command of a
// Get (named reports which), the number of volumes it named.
type lookupCounter struct {
	named func(name string, args []string) (n int, ok bool)
	mu    sync.Mutex
	names []int
}

func (c *lookupCounter) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return c.RunInput(ctx, nil, name, args...)
}

func (c *lookupCounter) RunInput(ctx context.Context, input []byte, name string, args ...string) ([]byte, error) {
	if n, ok := c.named(name, args); ok {
		c.mu.Lock()
		c.names = append(c.names, n)
		c.mu.Unlock()
	}
	return command.Exec{}.RunInput(ctx, input, name, args...)
}

// getsAtOnce creates six volumes, lets others (a volume of the store's
// kind that no volume owns, named by the caller's extra) be made, and then
// makes four Gets of each at once, and of two that do not exist: each
// must get its own answer, and the look-ups must have named more than one
// volume in one command, or nothing was proven.
func getsAtOnce(t *testing.T, s *store, c *lookupCounter, extra func(b backends.Backend, parent string) map[string]error) {
	b := s.backend(c)
	ctx := ctxT(t)
	want := map[string]error{}
	var parent string
	for i := range 6 {
		id := "pvc-get-" + strconv.Itoa(i)
		v, err := b.Create(ctx, id, 4*s.unit)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Delete(context.Background(), id) })
		want[id], parent = nil, path.Dir(v.Name)
	}
	s.foreign(t, "pvc-foreign", 4*s.unit)
	want["pvc-foreign"] = backends.ErrConflict
	want["pvc-none-1"], want["pvc-none-2"] = backends.ErrNotFound, backends.ErrNotFound
	for id, w := range extra(b, parent) {
		want[id] = w
	}
	c.mu.Lock()
	c.names = nil
	c.mu.Unlock()
	const rounds = 4
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for range rounds {
		for id, w := range want {
			wg.Go(func() {
				v, err := b.Get(ctx, id)
				ok := (w == nil && err == nil && v.ID == id && v.SizeBytes == 4*s.unit) || (w != nil && errors.Is(err, w))
				if !ok {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("Get %s: %+v, %v; want %v", id, v, err, w))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("%d Gets at once ran %d look-ups naming %v volumes", rounds*len(want), len(c.names), c.names)
	if len(c.names) == 0 || slices.Max(c.names) < 2 {
		t.Fatalf("no look-up named more than one volume (%v): the Gets were not looked up together, so this proved nothing", c.names)
	}
}

// TestZFSGetsAtOnce proves on real ZFS what the backend reads from one
// zfs list naming many zvols, which is how Gets made at once are
// answered: each volume its own row, ErrNotFound for a name that does not
// exist, ErrConflict for a filesystem and for a zvol no volume owns, when
// they are listed together and zfs exits 1 for the names it cannot open.
func TestZFSGetsAtOnce(t *testing.T) {
	s := zfsStore(t, "zfs-gets", true)
	c := &lookupCounter{named: func(name string, args []string) (int, bool) {
		if name == "zfs" && len(args) > 6 && args[0] == "list" && args[3] == "volume" {
			return len(args) - 6, true
		}
		return 0, false
	}}
	getsAtOnce(t, s, c, func(_ backends.Backend, parent string) map[string]error {
		if _, err := fixture.Command(context.Background(), "zfs", "zfs", "create", "-o", "canmount=off", parent+"/pvc-fs"); err != nil {
			t.Fatal(err)
		}
		return map[string]error{"pvc-fs": backends.ErrConflict}
	})
}

// TestLVMGetsAtOnce is TestZFSGetsAtOnce for lvs on a thin pool: lvs
// reports the LVs it finds and exits 5 for those it does not.
func TestLVMGetsAtOnce(t *testing.T) {
	s, _ := lvmStore(t, "lvm-gets", true)
	c := &lookupCounter{named: func(name string, args []string) (int, bool) {
		// lvm lvs --config C --reportformat json --units b --nosuffix -o F LVs...
		if name == "lvm" && len(args) > 10 && args[0] == "lvs" {
			return len(args) - 10, true
		}
		return 0, false
	}}
	getsAtOnce(t, s, c, func(backends.Backend, string) map[string]error { return nil })
}
