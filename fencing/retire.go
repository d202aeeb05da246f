package fencing

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"
)

// RetireOptions say which tombstones Retire may remove.
type RetireOptions struct {
	// Grace is how long a tombstone is kept after its lifecycle ended.
	// During the grace a retried End of that lifecycle is accepted
	// (rule 14); after retirement it is refused with LIFECYCLE_ENDED, which
	// the controller can read as "already deleted". Must not be negative.
	Grace time.Duration

	// Keep, if not nil, is asked about each volume whose tombstone is old
	// enough; returning true keeps it, for example while the volume's
	// storage still exists because its deletion failed after End. Keep runs
	// without any lock held and may be slow.
	Keep func(volumeID string) bool

	// DryRun makes Retire only report the volumes whose marks it would
	// remove, writing nothing.
	DryRun bool
}

// Retire removes the mark files of volumes whose lifecycle ended at least
// opts.Grace ago, and returns their volume IDs.
//
// Retiring weakens no rule of the decision table. Every lifecycle listed in
// a retired mark is first written, durably, to the ledger of retired
// lifecycles, and the mark file is removed only afterwards; a request from
// any of those lifecycles is refused with LIFECYCLE_ENDED forever (rule 4,
// or rules 10 and 15 once a new lifecycle has begun). What retirement gives up is
// only what an ended lifecycle can no longer use: its generation, and the
// acceptance of its End retries after the grace. A new lifecycle for the
// same volume ID is admitted as for a volume never seen (rule 5), which is
// right because every earlier lifecycle of it is in the ledger.
//
// A crash between the two steps leaves a lifecycle in both the ledger and
// its mark, which is harmless. Marks that cannot be read are never removed
// (fail closed); they are reported in the returned error, which joins every
// problem met while the other volumes were still processed.
func (s *Store) Retire(ctx context.Context, opts RetireOptions) ([]string, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	fail := func(path string, err error) error { return &Error{Op: "retire", Path: path, Err: err} }
	if s.closed {
		return nil, fail(s.dir, ErrClosed)
	}
	if opts.Grace < 0 {
		return nil, fail(s.dir, fmt.Errorf("negative grace %v", opts.Grace))
	}
	cutoff := s.now().Add(-opts.Grace)
	eligible := func(m *Mark) bool {
		at, ended := m.endedAt()
		return ended && !at.After(cutoff)
	}

	ids, err := s.volumeIDs()
	if err != nil {
		return nil, fail(s.dir, err)
	}
	var (
		problems   []error
		candidates []string
		fps        []fingerprint
	)
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, fail(s.dir, err)
		}
		path := s.path(id)
		m, err := s.readMark(id, path)
		if err != nil {
			problems = append(problems, &Error{Op: "retire", VolumeID: id, Path: path, Reason: ReasonMarkUnreadable, Err: err})
			continue
		}
		if m == nil || !eligible(m) || (opts.Keep != nil && opts.Keep(id)) {
			continue
		}
		candidates = append(candidates, id)
		for _, e := range m.History {
			fps = append(fps, fingerprintOf(id, e.UID))
		}
	}
	if len(candidates) == 0 {
		return nil, errors.Join(problems...)
	}
	if opts.DryRun {
		slices.Sort(candidates)
		return candidates, errors.Join(problems...)
	}
	// Adding an ended lifecycle to the ledger is safe at any moment, even
	// if its mark then stays: a lifecycle never comes back from ended.
	if err := s.addToLedger(fps); err != nil {
		return nil, errors.Join(append(problems, fail(s.dir, err))...)
	}
	l := s.ledger.Load()

	var retired []string
	for _, id := range candidates {
		ok, err := s.retireOne(ctx, id, l, eligible)
		if err != nil {
			problems = append(problems, err)
		}
		if ok {
			retired = append(retired, id)
		}
	}
	if len(retired) > 0 {
		// A removal lost to a power failure only brings back a tombstone,
		// which refuses the same requests; still, make it stick.
		if err := syncDir(s.d); err != nil {
			problems = append(problems, fail(s.dir, err))
		}
	}
	slices.Sort(retired)
	return retired, errors.Join(problems...)
}

// retireOne removes id's mark if, under the volume's lock, it is still an
// eligible tombstone whose every lifecycle is in ledger l. The mark may have
// changed since it was first read: a new lifecycle may have been admitted,
// or may have ended with a UID the ledger does not hold yet.
func (s *Store) retireOne(ctx context.Context, id string, l *ledger, eligible func(*Mark) bool) (bool, error) {
	path := s.path(id)
	unlock, err := s.locks.lock(ctx, id)
	if err != nil {
		return false, &Error{Op: "retire", VolumeID: id, Path: path, Err: err}
	}
	defer unlock()
	m, err := s.readMark(id, path)
	if err != nil {
		return false, &Error{Op: "retire", VolumeID: id, Path: path, Reason: ReasonMarkUnreadable, Err: err}
	}
	if m == nil || !eligible(m) {
		return false, nil
	}
	for _, e := range m.History {
		if !l.contains(fingerprintOf(id, e.UID)) {
			return false, nil
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, &Error{Op: "retire", VolumeID: id, Path: path, Err: err}
	}
	return true, nil
}
