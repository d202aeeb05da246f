package reconcile

import (
	"slices"
	"testing"
	"time"
)

// TestCoalescerFiresOncePerSettle: the changes of a burst share one
// refresh per store, each store its own, after the settle time; a change
// noted while a refresh runs, or after it, gets another.
func TestCoalescerFiresOncePerSettle(t *testing.T) {
	var timers []func()
	var waits []time.Duration
	var fired []string
	var c *coalescer
	c = newCoalescer(time.Second, func(key string) {
		fired = append(fired, key)
		if key == "b" && len(fired) == 2 {
			c.note("b") // a change while b's refresh runs
		}
	})
	c.afterFunc = func(d time.Duration, f func()) {
		waits = append(waits, d)
		timers = append(timers, f)
	}
	run := func() {
		t.Helper()
		if len(timers) == 0 {
			t.Fatal("no refresh pending")
		}
		f := timers[0]
		timers = timers[1:]
		f()
	}
	for range 100 {
		c.note("a")
	}
	c.note("b")
	if len(timers) != 2 || !slices.Equal(waits, []time.Duration{time.Second, time.Second}) {
		t.Fatalf("%d refreshes pending after 100 changes of a and 1 of b, waiting %v; want 2, each a second", len(timers), waits)
	}
	run()
	run()
	if !slices.Equal(fired, []string{"a", "b"}) {
		t.Fatalf("refreshes %v, want a then b", fired)
	}
	// b's change while its refresh ran is pending; a change of a after
	// its refresh is too.
	c.note("a")
	if len(timers) != 2 {
		t.Fatalf("%d refreshes pending, want b's (noted while its refresh ran) and a's", len(timers))
	}
	run()
	run()
	if !slices.Equal(fired, []string{"a", "b", "b", "a"}) {
		t.Errorf("refreshes %v, want a, b, b, a", fired)
	}
	if len(timers) != 0 {
		t.Errorf("%d refreshes still pending", len(timers))
	}
}

// TestCoalescerTimer: with the real timer, a note fires once, after the
// settle time.
func TestCoalescerTimer(t *testing.T) {
	done := make(chan time.Time, 2)
	c := newCoalescer(20*time.Millisecond, func(string) { done <- time.Now() })
	start := time.Now()
	c.note("a")
	select {
	case at := <-done:
		if at.Sub(start) < 20*time.Millisecond {
			t.Errorf("fired after %v, before the settle time", at.Sub(start))
		}
	case <-time.After(time.Minute):
		t.Fatal("no refresh within a minute")
	}
}
