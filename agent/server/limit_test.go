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

// TestCreateLogsWhereTimeWent: a CreateVolume's "volume created" record
// says how long its backend create waited for a change slot and how long
// the create itself took: with one slot, a create held for a while shows
// it as create time, and the create queued behind it as slot wait.
func TestCreateLogsWhereTimeWent(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.StoreConcurrency = 1 })
	unblock, first := h.blockedCreate("pvc-first")
	second := make(chan error, 1)
	go func() { _, err := h.create("pvc-second", tok(uid1, 1), 1<<20); second <- err }()
	const held = 200 * time.Millisecond
	time.Sleep(held)
	unblock()
	for _, done := range []<-chan error{first, second} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]map[string]any{}
	for _, r := range h.logs.records(t) {
		if r["msg"] == "volume created" {
			got[r["volume_id"].(string)] = r
		}
	}
	seconds := func(id, key string) float64 {
		t.Helper()
		v, ok := got[id][key].(float64)
		if !ok {
			t.Fatalf("%s: the volume created record has no %s: %v", id, key, got[id])
		}
		return v
	}
	if c := seconds("pvc-first", "create_seconds"); c < held.Seconds() {
		t.Errorf("the held create took %.3f s by its record, less than the %v it was held", c, held)
	}
	if w := seconds("pvc-first", "slot_wait_seconds"); w >= held.Seconds()/2 {
		t.Errorf("the first create waited %.3f s for a free slot", w)
	}
	if w := seconds("pvc-second", "slot_wait_seconds"); w < held.Seconds()/2 {
		t.Errorf("the create queued behind the held one waited %.3f s for its slot by its record, want about %v", w, held)
	}
	if c := seconds("pvc-second", "create_seconds"); c < 0 || c >= held.Seconds() {
		t.Errorf("the queued create took %.3f s by its record", c)
	}
}
