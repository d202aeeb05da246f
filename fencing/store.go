package fencing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDir is where pillar-agent keeps its marks: a hostPath on the storage
// node, so that marks outlive container restarts and reboots.
const DefaultDir = "/var/lib/pillar-csi/agent/generations"

// DefaultHistoryLimit is how many ended lifecycles a mark lists before the
// oldest move to the ledger of retired lifecycles.
const DefaultHistoryLimit = 16

// lockPoll is how often Open retries a directory held by another store.
const lockPoll = 25 * time.Millisecond

// Options configure a Store. The zero value is valid.
type Options struct {
	// Now returns the current time. It stamps lifecycles when they end and
	// decides which tombstones Retire may remove. Default: time.Now.
	Now func() time.Time

	// HistoryLimit is how many ended lifecycles a mark keeps, 1..1024;
	// 0 means DefaultHistoryLimit. When an end would exceed it, the oldest
	// entries are moved to the ledger first, so they stay refused.
	HistoryLimit int
}

// Store keeps the durable fencing marks of the volumes of one storage node:
// one file per volume in one directory, plus the ledger of retired
// lifecycles.
//
// Every check-and-advance holds its volume's lock from reading the mark to
// the durable write of the next one, so concurrent requests for one volume
// are decided one after another, each against the mark the previous one
// left. Requests for different volumes do not wait for each other. Across
// processes, Open takes an exclusive flock on the directory: a second store
// on the same directory, in this process or another, cannot open it until
// the first is closed or its process has died.
//
// A Store is safe for concurrent use.
type Store struct {
	dir          string
	id           string   // see IdentityFileName
	d            *os.File // the directory, open for the flock and for fsync
	now          func() time.Time
	historyLimit int

	// life is read-held by every operation and write-held by Close, so
	// Close waits for operations in flight and none starts after it.
	life   sync.RWMutex
	closed bool

	locks volumeLocks

	// ledgerMu serializes writers of the ledger (Retire, and an end that
	// overflows a mark's history). Readers load the current ledger without
	// a lock; a new one is published only after it is durable.
	ledgerMu sync.Mutex
	ledger   atomic.Pointer[ledger]
}

// Open opens the store in dir, creating the directory (mode 0700) if
// needed, and locks it against other stores. If another store holds the
// lock, Open retries until ctx is done and then fails with an error that
// wraps ErrLocked, so pass a context with a deadline.
//
// Open removes temporary files that an interrupted write left behind (safe,
// because no other store can be writing) and loads the ledger. A ledger that
// cannot be read makes Open fail: without it the store could not tell a new
// lifecycle from a retired one, so it refuses to run rather than guess.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	s := &Store{dir: dir, now: opts.Now, historyLimit: opts.HistoryLimit}
	fail := func(path string, err error) (*Store, error) {
		if s.d != nil {
			s.d.Close() // also drops the flock
		}
		return nil, &Error{Op: "open", Path: path, Err: err}
	}
	if dir == "" {
		return fail(dir, errors.New("empty directory name"))
	}
	if s.now == nil {
		s.now = time.Now
	}
	switch {
	case s.historyLimit == 0:
		s.historyLimit = DefaultHistoryLimit
	case s.historyLimit < 1 || s.historyLimit > maxHistory:
		return fail(dir, fmt.Errorf("history limit %d is outside 1..%d", opts.HistoryLimit, maxHistory))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(dir, err)
	}
	d, err := lockDir(ctx, dir)
	if err != nil {
		return fail(dir, err)
	}
	s.d = d
	if err := s.removeTemporaries(); err != nil {
		return fail(dir, err)
	}
	l := &ledger{}
	path := filepath.Join(dir, ledgerFileName)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fail(path, err)
	default:
		if l, err = decodeLedger(data); err != nil {
			return fail(path, err)
		}
	}
	s.ledger.Store(l)
	if s.id, err = loadIdentity(s.d, dir); err != nil {
		return fail(filepath.Join(dir, IdentityFileName), err)
	}
	return s, nil
}

// lockDir opens the directory dir and takes its exclusive flock, retrying
// while another store holds it until ctx is done; the error then wraps
// ErrLocked. Closing the returned file releases the lock.
func lockDir(ctx context.Context, dir string) (*os.File, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		busy, err := tryLockDir(d)
		if err != nil {
			d.Close()
			return nil, err
		}
		if !busy {
			return d, nil
		}
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			d.Close()
			return nil, fmt.Errorf("%w: %w", ErrLocked, ctx.Err())
		case <-t.C:
		}
	}
}

// removeTemporaries deletes what renameio leaves when a writer dies between
// creating its temporary file (".<target><digits>") and renaming it.
func (s *Store) removeTemporaries() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	removed := false
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, ".") || !e.Type().IsRegular() {
			continue
		}
		if t := n[1:]; strings.HasPrefix(t, readablePrefix) || strings.HasPrefix(t, base32Prefix) || strings.HasPrefix(t, ledgerFileName) || strings.HasPrefix(t, IdentityFileName) {
			if err := os.Remove(filepath.Join(s.dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			removed = true
		}
	}
	if removed {
		return syncDir(s.d)
	}
	return nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the directory lock. It waits for operations in flight,
// including functions running under Do; later calls fail with ErrClosed.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return &Error{Op: "close", Path: s.dir, Err: ErrClosed}
	}
	s.closed = true
	uerr := unlockDir(s.d)
	cerr := s.d.Close()
	if err := errors.Join(uerr, cerr); err != nil {
		return &Error{Op: "close", Path: s.dir, Err: err}
	}
	return nil
}

// Advance is the check-and-advance for a call that changes a volume within
// its lifecycle (KindMutate). If the decision table accepts tok, the mark
// records it durably before Advance returns the new mark; otherwise the
// error says why (see Error and RejectionReason) and nothing was written.
func (s *Store) Advance(ctx context.Context, volumeID string, tok Token) (*Mark, error) {
	return s.once(ctx, "advance", KindMutate, volumeID, tok)
}

// End is the check-and-advance for the call that ends a volume's lifecycle
// (KindEnd, DeleteVolume). If accepted, the mark becomes a durable tombstone
// before End returns: from then on no request of tok's lifecycle changes the
// volume, except a retried End (rule 14). Call End before deleting the
// volume's resources, so a stale request cannot race the deletion.
func (s *Store) End(ctx context.Context, volumeID string, tok Token) (*Mark, error) {
	return s.once(ctx, "end", KindEnd, volumeID, tok)
}

func (s *Store) once(ctx context.Context, op string, k Kind, id string, tok Token) (*Mark, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	m, unlock, err := s.admit(ctx, op, k, id, tok, nil)
	if err != nil {
		return nil, err
	}
	unlock()
	return m, nil
}

// Do admits a request like Advance or End and, if it is accepted, runs fn
// while still holding the volume's lock, returning fn's error. Because
// every decision for the volume waits for that lock, once Do has accepted a
// token no older token can be accepted until fn has returned, and once a
// newer token has been accepted no fn of an older one is running. Use it
// when the change itself, not only its admission, must be ordered.
//
// fn should honour ctx: other requests for the volume wait for it.
func (s *Store) Do(ctx context.Context, volumeID string, k Kind, tok Token, fn func(context.Context) error) error {
	return s.DoChecked(ctx, volumeID, k, tok, nil, fn)
}

// Exists reports whether a volume's resources exist on the storage node
// (a backend volume, an export). Store.DoChecked calls it to tell a volume
// that was never created from one whose mark was lost.
type Exists func(ctx context.Context) (bool, error)

// DoChecked is Do for a caller that can tell whether the volume exists: when
// the volume has no mark, exists is called under the volume's lock, and a
// volume that exists is refused with UNMARKED (rule 19) instead of being
// handed to the token's lifecycle by rule 5 or 6. An error of exists
// refuses the request too (not as a fencing rejection): the store never
// guesses that a volume is new. exists is not called when the volume has a
// mark, so it costs nothing after a volume's first request. A nil exists
// is Do.
func (s *Store) DoChecked(ctx context.Context, volumeID string, k Kind, tok Token, exists Exists, fn func(context.Context) error) error {
	s.life.RLock()
	defer s.life.RUnlock()
	op := "do"
	if k == KindEnd {
		op = "do end"
	}
	_, unlock, err := s.admit(ctx, op, k, volumeID, tok, exists)
	if err != nil {
		return err
	}
	defer unlock()
	return fn(ctx)
}

// Check is one lifecycle a call of DoCheckedAll is admitted by.
type Check struct {
	VolumeID string
	Kind     Kind
	Token    Token
	// Exists is DoChecked's; nil skips rule 19.
	Exists Exists
}

// DoCheckedAll is DoChecked for a call that changes several lifecycles at
// once (a snapshot of a volume, a volume made from a snapshot): it admits
// every check, in the order given, and runs fn holding every volume's
// lock. The caller orders the checks the same way in every call (by
// VolumeID, say), so that two calls never wait for each other in a cycle.
// A check refused after others were admitted leaves their marks advanced,
// as a retry of the same tokens would. On a refusal fn does not run and
// the error is that check's, with refused its index; refused is -1 when
// every check was admitted (fn's error, or nil).
func (s *Store) DoCheckedAll(ctx context.Context, checks []Check, fn func(context.Context) error) (refused int, err error) {
	s.life.RLock()
	defer s.life.RUnlock()
	var unlocks []func()
	defer func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}()
	for i, c := range checks {
		if slices.ContainsFunc(checks[:i], func(o Check) bool { return o.VolumeID == c.VolumeID }) {
			return i, &Error{Op: "do", VolumeID: c.VolumeID, Reason: ReasonMalformed, Err: errors.New("checked twice in one call")}
		}
		op := "do"
		if c.Kind == KindEnd {
			op = "do end"
		}
		_, unlock, err := s.admit(ctx, op, c.Kind, c.VolumeID, c.Token, c.Exists)
		if err != nil {
			return i, err
		}
		unlocks = append(unlocks, unlock)
	}
	return -1, fn(ctx)
}

// admit runs the decision table for one request and, if it is accepted,
// makes the next mark durable. On success the caller holds the volume's
// lock and must call unlock. The caller holds s.life for reading.
// A nil exists skips rule 19.
func (s *Store) admit(ctx context.Context, op string, k Kind, id string, tok Token, exists Exists) (*Mark, func(), error) {
	if s.closed {
		return nil, nil, &Error{Op: op, VolumeID: id, Path: s.dir, Err: ErrClosed}
	}
	// Rules 1 and 2 need no I/O and come first, so an invalid request is
	// refused the same way whatever state the volume is in.
	if d, ok := checkRequest(k, tok); !ok {
		return nil, nil, refusal(op, id, "", d)
	}
	if err := ValidateVolumeID(id); err != nil {
		return nil, nil, &Error{Op: op, VolumeID: id, Reason: ReasonMalformed, Err: err}
	}
	path := s.path(id)
	unlock, err := s.locks.lock(ctx, id)
	if err != nil {
		return nil, nil, &Error{Op: op, VolumeID: id, Path: path, Err: err}
	}
	cur, err := s.readMark(id, path)
	if err != nil {
		unlock()
		// Rule 3: fail closed. The file is left as it is for an operator
		// to inspect; it is never overwritten by a guess.
		return nil, nil, &Error{Op: op, VolumeID: id, Path: path, Reason: ReasonMarkUnreadable, Err: err}
	}
	l := s.ledger.Load()
	d := Decide(cur, k, tok, s.now(), func(uid string) bool { return l.contains(fingerprintOf(id, uid)) })
	if !d.Accepted() {
		unlock()
		return nil, nil, refusal(op, id, path, d)
	}
	if cur == nil && exists != nil {
		found, err := exists(ctx)
		if err != nil {
			unlock()
			return nil, nil, &Error{Op: op, VolumeID: id, Path: path, Err: fmt.Errorf("checking whether the unmarked volume exists: %w", err)}
		}
		if found {
			unlock()
			return nil, nil, refusal(op, id, path, reject(19, ReasonUnmarked,
				"the volume has no mark, yet it exists on this storage node: its mark was lost; adopt it for the lifecycle its PillarVolumeState names (pillar-agent marks adopt)"))
		}
	}
	if d.Changed {
		if err := s.writeMark(ctx, id, path, d.Mark); err != nil {
			unlock()
			return nil, nil, &Error{Op: op, VolumeID: id, Path: path, Err: err}
		}
	}
	return d.Mark, unlock, nil
}

func refusal(op, id, path string, d Decision) error {
	err := errors.New(d.Detail)
	switch d.Reason {
	case ReasonMissingToken:
		err = fmt.Errorf("%w: %s", ErrMissingToken, d.Detail)
	case ReasonMalformed:
		err = fmt.Errorf("%w: %s", ErrMalformed, d.Detail)
	}
	return &Error{Op: op, VolumeID: id, Path: path, Reason: d.Reason, Err: err}
}

func (s *Store) path(id string) string {
	name, _ := FileName(id) // id is valid here
	return filepath.Join(s.dir, name)
}

// readMark returns volume id's mark, or nil if it has none. A file that
// exists but cannot be read or decoded is an error, never "no mark".
func (s *Store) readMark(id, path string) (*Mark, error) {
	data, err := readMarkData(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeMarkOf(id, data)
}

// readMarkData returns the bytes of a mark file, at most one byte more than
// a mark can hold; a missing file is an error wrapping fs.ErrNotExist.
func readMarkData(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxMarkFileLen+1))
}

// decodeMarkOf decodes the contents of volume id's mark file.
func decodeMarkOf(id string, data []byte) (*Mark, error) {
	got, m, err := decodeMark(data)
	if err != nil {
		return nil, err
	}
	if got != id {
		return nil, fmt.Errorf("%w: the file holds the mark of volume %q", ErrCorruptMark, got)
	}
	return m, nil
}

// writeMark makes m durable as volume id's mark. If m lists more ended
// lifecycles than the history limit, the oldest are made durable in the
// ledger first, so that at no point is an ended lifecycle in neither.
func (s *Store) writeMark(ctx context.Context, id, path string, m *Mark) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if over := len(m.History) - s.historyLimit; over > 0 {
		fps := make([]fingerprint, over)
		for i, e := range m.History[:over] {
			fps[i] = fingerprintOf(id, e.UID)
		}
		if err := s.addToLedger(fps); err != nil {
			return err
		}
		m.History = slices.Clone(m.History[over:])
	}
	data, err := encodeMark(id, m)
	if err != nil {
		return err
	}
	return writeFileAtomic(s.d, s.dir, filepath.Base(path), data)
}

// addToLedger makes fps durable in the ledger and then publishes it.
func (s *Store) addToLedger(fps []fingerprint) error {
	s.ledgerMu.Lock()
	defer s.ledgerMu.Unlock()
	next, grew := s.ledger.Load().with(fps)
	if !grew {
		return nil
	}
	if err := writeFileAtomic(s.d, s.dir, ledgerFileName, next.encode()); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	s.ledger.Store(next)
	return nil
}

// Get returns volume id's mark, or nil if it has none. It changes nothing.
func (s *Store) Get(ctx context.Context, volumeID string) (*Mark, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return nil, &Error{Op: "get", VolumeID: volumeID, Path: s.dir, Err: ErrClosed}
	}
	if err := ValidateVolumeID(volumeID); err != nil {
		return nil, &Error{Op: "get", VolumeID: volumeID, Reason: ReasonMalformed, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "get", VolumeID: volumeID, Err: err}
	}
	path := s.path(volumeID)
	m, err := s.readMark(volumeID, path)
	if err != nil {
		return nil, &Error{Op: "get", VolumeID: volumeID, Path: path, Reason: ReasonMarkUnreadable, Err: err}
	}
	return m, nil
}

// volumeIDs lists the volumes that have a mark file.
func (s *Store) volumeIDs() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if id, err := VolumeIDFromFileName(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
