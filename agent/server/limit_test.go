package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStoreSlots(t *testing.T) {
	be := newFakeBackend(t.TempDir())
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	be.blockCh, be.enteredCh = block, entered
	l := limit(be, 1)
	done := make(chan error, 1)
	go func() { _, err := l.Create(context.Background(), "pvc-a", 4096); done <- err }()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := l.Delete(ctx, "pvc-b")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call waiting for the only slot = %v, want the deadline", err)
	}
	if got := status.Code(toStatus(ctx, "GetCapacity", "", err)); got != codes.DeadlineExceeded {
		t.Errorf("mapped to %v, want DeadlineExceeded", got)
	}
	if len(be.calls) != 0 {
		t.Errorf("the queued call reached the backend: %v", be.calls)
	}
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(context.Background(), "pvc-a"); err != nil {
		t.Errorf("after the slot was freed: %v", err)
	}
}

// TestStoreLookupsPassQueuedChanges: with every change slot taken and more
// changes queued, a look-up (a device path, a listing, a capacity) runs at
// once: a create's own device look-up and an export's never wait behind
// a burst of creates.
func TestStoreLookupsPassQueuedChanges(t *testing.T) {
	be := newFakeBackend(t.TempDir())
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	be.blockCh, be.enteredCh = block, entered
	l := limit(be, 1)
	done := make(chan error, 2)
	go func() { _, err := l.Create(context.Background(), "pvc-a", 4096); done <- err }()
	<-entered
	// A second create waits for the only change slot.
	go func() { _, err := l.Create(context.Background(), "pvc-b", 4096); done <- err }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a guard, not a measure
	defer cancel()
	if _, err := l.List(ctx); err != nil {
		t.Fatalf("a listing behind queued creates: %v", err)
	}
	if _, err := l.Capacity(ctx); err != nil {
		t.Fatalf("a capacity behind queued creates: %v", err)
	}
	close(block)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// sharingBackend is a fake whose Gets share their commands
// (backends.GetSharer).
type sharingBackend struct{ *fakeBackend }

func (sharingBackend) SharesGets() bool { return true }

// TestStoreSharedGetsTakeNoSlot: with every look-up slot taken, a Get of
// a backend that shares the commands of Gets made at once runs (it
// bounds its commands itself), and a Get of any other backend waits.
func TestStoreSharedGetsTakeNoSlot(t *testing.T) {
	be := newFakeBackend(t.TempDir())
	if _, err := be.Create(context.Background(), "pvc-a", 4096); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		l     *limited
		waits bool
	}{
		{"a backend that shares its Gets", limit(sharingBackend{be}, 1), false},
		{"any other backend", limit(be, 1), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			release, err := c.l.lookup(context.Background(), "held")
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err = c.l.Get(ctx, "pvc-a")
			if waited := errors.Is(err, context.DeadlineExceeded); waited != c.waits || (!c.waits && err != nil) {
				t.Fatalf("Get with every look-up slot taken: %v; want it to wait: %v", err, c.waits)
			}
		})
	}
}
