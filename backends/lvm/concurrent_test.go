package lvm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
	"github.com/pillar-csi/pillar-csi/backends/internal/replaytest"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
)

// thinPool is a fake volume group for thin creates that run side by side:
// every listing shows the captured empty thin pool of 256 MiB, and each
// lvcreate reports its volume on started and succeeds once release is
// closed.
type thinPool struct {
	listing string
	started chan string
	release chan struct{}
}

func (p *thinPool) run(ctx context.Context, argv []string) ([]byte, error) {
	switch argv[1] {
	case "lvs":
		return []byte(p.listing), nil
	case "lvcreate":
		for i, a := range argv {
			if a == "--name" {
				p.started <- argv[i+1]
			}
		}
		select {
		case <-p.release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("unexpected command %q", argv)
}

func newThin(t *testing.T) (*lvm.Backend, *thinPool) {
	t.Helper()
	p := &thinPool{
		listing: commandtest.Load(t, "testdata/lvm-thin/create.1.txt").Stdout,
		started: make(chan string, 16),
		release: make(chan struct{}),
	}
	b, err := lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thinpool", Runner: commandtest.Func(p.run)})
	if err != nil {
		t.Fatal(err)
	}
	return b, p
}

// TestThinCreatesOverlap: thin creates are admitted one at a time, but
// their lvcreate commands run side by side (LVM's own lock serialises only
// their metadata updates).
func TestThinCreatesOverlap(t *testing.T) {
	b, p := newThin(t)
	var errcs []<-chan error
	for _, id := range []string{"a", "b", "c"} {
		errcs = append(errcs, replaytest.CreateAsync(b, id, 16<<20))
	}
	for i := range 3 {
		select {
		case <-p.started:
		case <-time.After(20 * time.Second): // a guard against a deadlock
			t.Fatalf("%d of 3 lvcreates started; the others wait for them", i)
		}
	}
	close(p.release)
	for _, errc := range errcs {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestThinConcurrentCreatesOvercommit: an lvcreate still running holds its
// bytes, although the pool's listing does not show its volume yet, so a
// create that fits the pool alone but not beside it is refused.
func TestThinConcurrentCreatesOvercommit(t *testing.T) {
	b, p := newThin(t)
	const half = 132 << 20 // two are more than the 256 MiB pool
	first := replaytest.CreateAsync(b, "a", half)
	<-p.started
	second := replaytest.CreateAsync(b, "b", half)
	select {
	case err := <-second:
		if !errors.Is(err, backends.ErrNoSpace) {
			t.Errorf("second create beside a running one: %v, want %v", err, backends.ErrNoSpace)
		}
	case v := <-p.started:
		t.Errorf("the lvcreate of %s started beside a, which leaves no room for it", v)
	}
	close(p.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
