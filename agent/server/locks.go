package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/api/keylock"
)

// volumeLocks lets one call at a time work on a volume. A second call for
// a busy volume waits for the first to finish, for as long as its own
// caller waits: the first is usually the same request, retried by a CO
// that gave up on it while its command ran, and the wait turns that retry
// into a quick, idempotent answer instead of a refusal that only grows the
// CO's backoff. A waiter whose caller goes away leaves without running
// anything, so no stale request runs late; fencing refuses an outdated
// token in any case.
//
// The locking is keylock's; what is left here is the agent's wording and
// status codes, which its clients already see.
type volumeLocks struct{ keylock.Locks }

// lock takes volume id's lock for op, waiting while another call holds
// it. It fails only when ctx ends first: DEADLINE_EXCEEDED or CANCELLED,
// naming the call it waited for.
func (l *volumeLocks) lock(ctx context.Context, id, op string) (unlock func(), err error) {
	unlock, err = l.Lock(ctx, id, op)
	if err != nil {
		var we *keylock.WaitError
		if !errors.As(err, &we) {
			return nil, status.Errorf(codes.Internal, "%s volume %q: %v", op, id, err)
		}
		return nil, status.Errorf(status.FromContextError(we.Err).Code(), "%s volume %q: waited for %s of the same volume to finish: %v", op, id, we.Holder, we.Err)
	}
	return unlock, nil
}

// tryLock takes volume id's lock for op, or returns an ABORTED status
// naming the call that holds it. For work that is better skipped than
// delayed (the agent's own reconciliation).
func (l *volumeLocks) tryLock(id, op string) (unlock func(), err error) {
	unlock, holder, ok := l.TryLock(id, op)
	if !ok {
		return nil, status.Errorf(codes.Aborted, "%s volume %q: %s for the same volume is in progress; retry later", op, id, holder)
	}
	return unlock, nil
}
