package reconcile

import (
	"sync"
	"testing"
	"time"
)

// TestCoalescerFiresOncePerSettle: the changes of a burst share one
// refresh per store, each store its own, and a change after the refresh
// started gets another.
func TestCoalescerFiresOncePerSettle(t *testing.T) {
	var mu sync.Mutex
	fired := map[string]int{}
	done := make(chan string, 16)
	c := newCoalescer(50*time.Millisecond, func(key string) {
		mu.Lock()
		fired[key]++
		mu.Unlock()
		done <- key
	})
	start := time.Now()
	for range 100 {
		c.note("a")
	}
	c.note("b")
	for range 2 {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("no refresh within a minute")
		}
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("fired after %v, before the settle time of 50ms", waited)
	}
	c.note("a")
	select {
	case k := <-done:
		if k != "a" {
			t.Errorf("fired %q, want a", k)
		}
	case <-time.After(time.Minute):
		t.Fatal("a change after the refresh got none within a minute")
	}
	// Nothing else is pending.
	select {
	case k := <-done:
		t.Errorf("an extra refresh of %q", k)
	case <-time.After(200 * time.Millisecond):
	}
	mu.Lock()
	defer mu.Unlock()
	if fired["a"] != 2 || fired["b"] != 1 {
		t.Errorf("refreshes %v; want a twice (100 changes, then 1) and b once", fired)
	}
}
