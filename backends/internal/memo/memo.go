// Package memo is what a backend remembers about its volumes between
// calls, to skip a listing whose answer it already has.
package memo

import "sync"

// Map maps volume IDs to what is remembered of each. It is safe for
// concurrent use; the zero Map is empty and ready.
type Map[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

// Get returns what is remembered of id, and whether anything is.
func (m *Map[V]) Get(id string) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[id]
	return v, ok
}

// Set remembers v for id.
func (m *Map[V]) Set(id string, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]V{}
	}
	m.m[id] = v
}

// Forget forgets id.
func (m *Map[V]) Forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, id)
}
