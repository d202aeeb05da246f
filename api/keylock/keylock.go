package keylock

import (
	"context"
	"fmt"
	"sync"
)

// Locks is a set of locks, one per key. The zero value is ready to use; a
// Locks must not be copied after first use.
type Locks struct {
	mu   sync.Mutex
	held map[string]*holder
}

// holder is the operation holding a key, and a channel closed when it
// lets go, which is what waiters block on.
type holder struct {
	op   string
	done chan struct{}
}

// WaitError is Lock's error when its context ended before the key came
// free. Unwrap gives the context's error, so errors.Is(err,
// context.DeadlineExceeded) and status.FromContextError work on it.
type WaitError struct {
	Key string
	// Holder is the operation that still held the key.
	Holder string
	Err    error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("waiting for %s of %q: %v", e.Holder, e.Key, e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// TryLock takes key's lock for op without waiting. When another operation
// holds it, ok is false and holder names that operation (for the caller's
// refusal message); unlock is then nil.
//
// Calling unlock more than once is harmless: only the first call lets
// go, so a deferred unlock after an early one cannot free the key under
// the next holder.
func (l *Locks) TryLock(key, op string) (unlock func(), holder string, ok bool) {
	unlock, h := l.take(key, op)
	if unlock == nil {
		return nil, h.op, false
	}
	return unlock, "", true
}

// Lock takes key's lock for op, waiting while another operation holds it.
// It fails only when ctx ends first, with a *WaitError naming the holder
// it waited for; a waiter whose caller has gone away never takes the
// lock, so no abandoned request runs late. Waiters are not served in any
// particular order.
func (l *Locks) Lock(ctx context.Context, key, op string) (unlock func(), err error) {
	for {
		unlock, h := l.take(key, op)
		if unlock != nil {
			return unlock, nil
		}
		select {
		case <-h.done:
		case <-ctx.Done():
			return nil, &WaitError{Key: key, Holder: h.op, Err: ctx.Err()}
		}
	}
}

// take takes the lock if it is free, or returns its holder.
func (l *Locks) take(key, op string) (func(), *holder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.held[key]; ok {
		return nil, h
	}
	if l.held == nil {
		l.held = map[string]*holder{}
	}
	h := &holder{op: op, done: make(chan struct{})}
	l.held[key] = h
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.held, key)
			l.mu.Unlock()
			close(h.done)
		})
	}, nil
}
