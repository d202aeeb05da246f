package server

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// volumeLocks lets one call at a time work on a volume. A second call for
// a busy volume waits for the first to finish, for as long as its own
// caller waits: the first is usually the same request, retried by a CO
// that gave up on it while its command ran, and the wait turns that retry
// into a quick, idempotent answer instead of a refusal that only grows the
// CO's backoff. A waiter whose caller goes away leaves without running
// anything, so no stale request runs late; fencing refuses an outdated
// token in any case.
type volumeLocks struct {
	mu   sync.Mutex
	busy map[string]*lockHolder // by volume ID
}

// lockHolder is the call holding a volume: its RPC, and a channel closed
// when it lets go.
type lockHolder struct {
	op   string
	done chan struct{}
}

// lock takes volume id's lock for op, waiting while another call holds
// it. It fails only when ctx ends first: DEADLINE_EXCEEDED or CANCELLED,
// naming the call it waited for.
func (l *volumeLocks) lock(ctx context.Context, id, op string) (unlock func(), err error) {
	for {
		unlock, h := l.take(id, op)
		if unlock != nil {
			return unlock, nil
		}
		select {
		case <-h.done:
		case <-ctx.Done():
			return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "%s volume %q: waited for %s of the same volume to finish: %v", op, id, h.op, ctx.Err())
		}
	}
}

// tryLock takes volume id's lock for op, or returns an ABORTED status
// naming the call that holds it. For work that is better skipped than
// delayed (the agent's own reconciliation).
func (l *volumeLocks) tryLock(id, op string) (unlock func(), err error) {
	unlock, h := l.take(id, op)
	if unlock == nil {
		return nil, status.Errorf(codes.Aborted, "%s volume %q: %s for the same volume is in progress; retry later", op, id, h.op)
	}
	return unlock, nil
}

// take takes the lock if it is free, or returns its holder.
func (l *volumeLocks) take(id, op string) (func(), *lockHolder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.busy[id]; ok {
		return nil, h
	}
	if l.busy == nil {
		l.busy = map[string]*lockHolder{}
	}
	h := &lockHolder{op: op, done: make(chan struct{})}
	l.busy[id] = h
	return func() {
		l.mu.Lock()
		delete(l.busy, id)
		l.mu.Unlock()
		close(h.done)
	}, nil
}
