// Package admit lets a backend admit thin creates, expansions, snapshots
// and clones against one pool's free space one at a time, while the
// commands it admitted run side by side.
//
// The admission decision and the reservation it makes are serialised by a
// Lock; the command runs after the lock is released. Until the command has
// ended, its bytes are reserved: every later decision sees them, whether
// or not the pool's listing already does (counted twice is only a smaller
// figure than the truth, never a larger one). A command that failed gives
// its bytes back; one that succeeded, or may have (killed, or ended by its
// context, or a panic), keeps them as used.
package admit

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/pillar-csi/pillar-csi/backends/internal/errs"
)

// Lock serialises a pool's admission decisions. The zero value is ready.
type Lock struct {
	mu       sync.Mutex
	reserved int64
	waiting  atomic.Int64 // callers of Reserve not yet holding mu
}

// Reserve calls decide with the lock held and the bytes reserved by
// admitted commands still running. When decide admits need bytes (a nil
// error), they are reserved until the Reservation ends; otherwise decide's
// error is returned and nothing is reserved. State the backend keeps for
// its decisions is guarded by the lock within decide and Reservation.End.
func (l *Lock) Reserve(decide func(reserved int64) (need int64, err error)) (*Reservation, error) {
	l.waiting.Add(1)
	l.mu.Lock()
	l.waiting.Add(-1)
	defer l.mu.Unlock()
	need, err := decide(l.reserved)
	if err != nil {
		return nil, err
	}
	l.reserved += need
	return &Reservation{l: l, n: need}, nil
}

// Waiting returns how many callers of Reserve wait for the lock: tests
// learn from it that a burst's callers all asked.
func (l *Lock) Waiting() int {
	return int(l.waiting.Load())
}

// Reserved returns the bytes reserved now.
func (l *Lock) Reserved() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reserved
}

// ErrMade is what decide returns when it finds the change made already (a
// retried call): nothing is reserved, and the caller returns what is
// there.
var ErrMade = errors.New("made already")

// Reservation is the bytes of one admitted command that is still running.
type Reservation struct {
	l     *Lock
	n     int64
	ended bool
}

// ErrPanicked is what End is given for a command whose caller panicked:
// the command may have run, so its bytes count as used.
var ErrPanicked = errors.New("the admitted change did not return")

// End ends the reservation of a command that returned err. When the
// command took its bytes or may have, used (if not nil) is called with
// them under the lock, for the backend's own figure; the next listing of
// the pool sees them in any case. Ending a reservation twice, or a nil
// one, does nothing.
func (r *Reservation) End(err error, used func(n int64)) {
	if r == nil {
		return
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.ended {
		return
	}
	r.ended = true
	r.l.reserved -= r.n
	if Took(err) && used != nil {
		used(r.n)
	}
}

// Took reports whether a command that returned err took the bytes it was
// admitted for, or may have: it succeeded, or it did not run to an exit
// of its own (killed by its context, not started, or a panic). A command
// that exited with a failure status took nothing: zfs create, zfs clone,
// zfs set volsize, lvcreate and lvextend change nothing when they fail.
func Took(err error) bool {
	if err == nil {
		return true
	}
	ce := errs.Command(err)
	return ce == nil || ce.ExitCode < 0
}
