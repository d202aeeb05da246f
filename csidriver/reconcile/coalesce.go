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

// coalescer calls fire(key) once for every call of note(key) within
// settle of the first one, settle after it.
type coalescer struct {
	settle time.Duration
	fire   func(key string)

	mu      sync.Mutex
	pending map[string]bool
}

func newCoalescer(settle time.Duration, fire func(key string)) *coalescer {
	return &coalescer{settle: settle, fire: fire, pending: map[string]bool{}}
}

// note asks for fire(key); it never blocks.
func (c *coalescer) note(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[key] {
		return
	}
	c.pending[key] = true
	time.AfterFunc(c.settle, func() {
		// Cleared first: a change noted while fire runs gets a refresh
		// of its own.
		c.mu.Lock()
		delete(c.pending, key)
		c.mu.Unlock()
		c.fire(key)
	})
}
