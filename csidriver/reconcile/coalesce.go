package reconcile

import (
	"sync"
	"time"
)

// storeChangedSettle is how long a store's capacity refresh waits after
// the first change that asks for it, so that the changes of a burst (one
// per volume created, expanded or deleted) share one refresh: one listing
// of the pool by its agent and one status write, not one per volume.
const storeChangedSettle = time.Second

// coalescer runs fire(key) settle after the first note(key) that found
// none pending; the notes of key until it runs share it.
type coalescer struct {
	settle time.Duration
	fire   func(key string)
	// afterFunc is time.AfterFunc; tests replace it.
	afterFunc func(d time.Duration, f func())

	mu      sync.Mutex
	pending map[string]bool
}

func newCoalescer(settle time.Duration, fire func(key string)) *coalescer {
	return &coalescer{settle: settle, fire: fire, pending: map[string]bool{},
		afterFunc: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// note asks for fire(key); it never blocks.
func (c *coalescer) note(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[key] {
		return
	}
	c.pending[key] = true
	c.afterFunc(c.settle, func() {
		// Cleared first: a change noted while fire runs gets a run of
		// its own.
		c.mu.Lock()
		delete(c.pending, key)
		c.mu.Unlock()
		c.fire(key)
	})
}
