package node

import "sync"

// volumeLocks is a set of per-volume try-locks; there is no lock over all
// volumes.
type volumeLocks struct {
	mu   sync.Mutex
	held map[string]bool
}

func (l *volumeLocks) tryLock(id string) (unlock func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[id] {
		return nil, false
	}
	l.held[id] = true
	return func() {
		l.mu.Lock()
		delete(l.held, id)
		l.mu.Unlock()
	}, true
}
