package server

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// volumeLocks lets one call at a time work on a volume. A second call for a
// volume that is busy is refused at once with ABORTED instead of queueing:
// the controller retries with backoff, and a queue of retries behind a
// slow zfs command would only run stale requests later.
type volumeLocks struct {
	mu   sync.Mutex
	busy map[string]string // volume ID -> the RPC holding it
}

// tryLock takes volume id's lock for op, or returns an ABORTED status
// naming the call that holds it.
func (l *volumeLocks) tryLock(id, op string) (unlock func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy == nil {
		l.busy = map[string]string{}
	}
	if holder, ok := l.busy[id]; ok {
		return nil, status.Errorf(codes.Aborted, "%s volume %q: %s for the same volume is in progress; retry later", op, id, holder)
	}
	l.busy[id] = op
	return func() {
		l.mu.Lock()
		delete(l.busy, id)
		l.mu.Unlock()
	}, nil
}
