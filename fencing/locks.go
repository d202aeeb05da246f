package fencing

import (
	"context"
	"sync"
)

// volumeLocks serializes work per volume ID. There is deliberately no lock
// over all volumes: a slow fsync for one volume must not hold up requests
// for the others. mu guards only the map, never I/O.
type volumeLocks struct {
	mu sync.Mutex
	m  map[string]*volumeLock
}

type volumeLock struct {
	ch   chan struct{} // holds one token while the volume is locked
	refs int           // holders and waiters; the entry is dropped at zero
}

// lock waits until it holds id's lock or ctx is done. The returned function
// releases the lock and must be called exactly once.
func (l *volumeLocks) lock(ctx context.Context, id string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*volumeLock)
	}
	vl := l.m[id]
	if vl == nil {
		vl = &volumeLock{ch: make(chan struct{}, 1)}
		l.m[id] = vl
	}
	vl.refs++
	l.mu.Unlock()

	select {
	case vl.ch <- struct{}{}:
		return func() {
			<-vl.ch
			l.release(id, vl)
		}, nil
	case <-ctx.Done():
		l.release(id, vl)
		return nil, ctx.Err()
	}
}

func (l *volumeLocks) release(id string, vl *volumeLock) {
	l.mu.Lock()
	if vl.refs--; vl.refs == 0 {
		delete(l.m, id)
	}
	l.mu.Unlock()
}
