package zfs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
	"github.com/pillar-csi/pillar-csi/backends/internal/replaytest"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
)

// pool is a fake ZFS pool for creates that run side by side: every
// capacity listing shows the captured empty pool (368989696 bytes
// available), a volume that is not there is missing, and each zfs create
// reports itself on started and then answers what its volume's entry in
// outcome says (success when there is none), once release is closed.
type pool struct {
	listing string
	started chan string
	release chan struct{}

	mu       sync.Mutex
	listings int
	outcome  map[string]error
}

const poolAvail int64 = 368989696

func newPool(t *testing.T) *pool {
	return &pool{
		listing: commandtest.Load(t, "testdata/zfs-sparse/create.1.txt").Stdout,
		started: make(chan string, 16),
		release: make(chan struct{}),
		outcome: map[string]error{},
	}
}

func (p *pool) run(ctx context.Context, argv []string) ([]byte, error) {
	switch {
	case argv[0] == "zfs" && argv[1] == "list" && argv[len(argv)-1] == "tank":
		p.mu.Lock()
		p.listings++
		p.mu.Unlock()
		return []byte(p.listing), nil
	case argv[0] == "zfs" && argv[1] == "list":
		return nil, commandtest.Exited(argv, 1, fmt.Sprintf("cannot open '%s': dataset does not exist", argv[len(argv)-1]))
	case argv[0] == "zpool":
		return []byte("tank\n"), nil
	case argv[0] == "zfs" && argv[1] == "create":
		vol := argv[len(argv)-1][strings.LastIndex(argv[len(argv)-1], "/")+1:]
		p.started <- vol
		select {
		case <-p.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return nil, p.outcome[vol]
	}
	return nil, fmt.Errorf("unexpected command %q", argv)
}

func (p *pool) countListings() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listings
}

func newSparse(t *testing.T, p *pool) *zfs.Backend {
	t.Helper()
	b, err := zfs.New(zfs.Config{Pool: "tank", ParentDataset: parent, Sparse: true, Runner: commandtest.Func(p.run)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitStarted waits for n zfs creates to be running and returns their
// volumes. The deadline is a guard against a deadlock, not a measure.
func (p *pool) waitStarted(t *testing.T, n int) []string {
	t.Helper()
	var vols []string
	for range n {
		select {
		case v := <-p.started:
			vols = append(vols, v)
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d creates started (%q); the others wait for them", len(vols), n, vols)
		}
	}
	return vols
}

// TestSparseCreatesOverlap: sparse creates are admitted one at a time but
// their zfs create commands run side by side.
func TestSparseCreatesOverlap(t *testing.T) {
	p := newPool(t)
	b := newSparse(t, p)
	var errcs []<-chan error
	for _, id := range []string{"a", "b", "c"} {
		errcs = append(errcs, replaytest.CreateAsync(b, id, 4*unit))
	}
	p.waitStarted(t, 3)
	close(p.release)
	for _, errc := range errcs {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n := p.countListings(); n != 1 {
		t.Errorf("%d capacity listings for three small creates, want 1", n)
	}
}

// TestSparseConcurrentCreatesOvercommit: a create still running holds its
// bytes, so a second one that fits the pool alone but not beside it is
// refused, on a fresh listing too.
func TestSparseConcurrentCreatesOvercommit(t *testing.T) {
	p := newPool(t)
	b := newSparse(t, p)
	half := (poolAvail/2/unit + 1) * unit
	first := replaytest.CreateAsync(b, "a", half)
	p.waitStarted(t, 1)
	second := replaytest.CreateAsync(b, "b", half)
	select {
	case err := <-second:
		if !errors.Is(err, backends.ErrNoSpace) {
			t.Errorf("second create beside a running one: %v, want %v", err, backends.ErrNoSpace)
		}
	case v := <-p.started:
		t.Errorf("the create of %s started beside a, which leaves no room for it", v)
	}
	close(p.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestSparseFailedCreateGivesBack: a zfs create that exited with an error
// took nothing, and its bytes are admitted again without a new listing;
// one that was killed may have taken them, and they are kept until a
// listing says otherwise.
func TestSparseFailedCreateGivesBack(t *testing.T) {
	big := (poolAvail*3/4/unit)*unit - 8*unit
	for _, c := range []struct {
		name     string
		outcome  error
		listings int
	}{
		{"exited", commandtest.Exited([]string{"zfs", "create"}, 1, "cannot create 'tank/pillar/vols/a': out of space"), 1},
		{"killed", commandtest.Killed([]string{"zfs", "create"}), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPool(t)
			p.outcome["a"] = c.outcome
			close(p.release)
			b := newSparse(t, p)
			if _, err := b.Create(context.Background(), "a", big); err == nil {
				t.Fatal("the failing create succeeded")
			}
			<-p.started
			if _, err := b.Create(context.Background(), "b", big); err != nil {
				t.Fatal(err)
			}
			<-p.started
			if n := p.countListings(); n != c.listings {
				t.Errorf("%d capacity listings, want %d", n, c.listings)
			}
		})
	}
}
