package fencing

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// ErrRecoveryRefused is wrapped by every error with which EndLifecycle, Adopt,
// ResetMark or ResetLedger refuse to change anything: the state on disk is
// not the one the operator named, or the change could let a stale
// lifecycle write again. Nothing was written.
var ErrRecoveryRefused = errors.New("recovery refused")

func refuseRecovery(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRecoveryRefused}, args...)...)
}

// LifecycleEnd reports what EndLifecycle did, or would do in a dry run.
type LifecycleEnd struct {
	VolumeID string
	Path     string
	// Before is the mark as found, After the mark written (or, in a dry
	// run, the one that would be).
	Before, After *Mark
	// Changed is false when the named lifecycle had already ended: then
	// nothing is written.
	Changed bool
}

// EndLifecycle ends lifecycle uid of volumeID on an operator's word, for a
// volume refused with LIFECYCLE_REPLACED: the mark's active lifecycle is
// one the controller no longer has (its PillarVolumeState was deleted
// without the End reaching the agent), so every new lifecycle of the volume
// is refused.
//
// uid must be the mark's active lifecycle; any other UID, a volume without
// a mark, and an unreadable mark are refused (ErrRecoveryRefused). The mark
// then changes exactly as an accepted End of uid at the mark's own
// generation changes it (rule 9): it becomes a tombstone and uid joins its
// history, so uid is refused for ever after (rules 10, 12 and 15), and the
// next new lifecycle is admitted by the ordinary rule 16. The mark is never
// switched to another lifecycle. If uid has already ended, nothing changes.
// With dryRun, nothing is written either way.
func (s *Store) EndLifecycle(ctx context.Context, volumeID, uid string, dryRun bool) (*LifecycleEnd, error) {
	const op = "end lifecycle"
	path, done, err := s.beginRecovery(ctx, op, volumeID, uid)
	if err != nil {
		return nil, err
	}
	defer done()
	fail := func(err error) (*LifecycleEnd, error) {
		return nil, &Error{Op: op, VolumeID: volumeID, Path: path, Err: err}
	}
	cur, err := s.readMark(volumeID, path)
	switch {
	case err != nil:
		return fail(refuseRecovery("the mark cannot be read (%w); a damaged mark is replaced with ResetMark", err))
	case cur == nil:
		return fail(refuseRecovery("the volume has no mark: no lifecycle holds it, so there is none to end"))
	case cur.UID != uid:
		return fail(refuseRecovery("the mark's lifecycle is %q (%s), not %q; only the lifecycle the mark names can be ended", cur.UID, cur.Phase, uid))
	case cur.Phase == PhaseEnded:
		return &LifecycleEnd{VolumeID: volumeID, Path: path, Before: cur, After: cur}, nil
	}
	l := s.ledger.Load()
	d := Decide(cur, KindEnd, Token{UID: uid, Generation: cur.Generation}, s.now(),
		func(u string) bool { return l.contains(fingerprintOf(volumeID, u)) })
	if !d.Accepted() || d.Rule != 9 {
		// The mark is active and names uid: rule 9 is the only one left.
		return fail(fmt.Errorf("unexpected decision: rule %d, %s: %s", d.Rule, d.Reason, d.Detail))
	}
	res := &LifecycleEnd{VolumeID: volumeID, Path: path, Before: cur, After: d.Mark, Changed: true}
	if dryRun {
		return res, nil
	}
	if err := s.writeMark(ctx, volumeID, path, d.Mark); err != nil {
		return fail(err)
	}
	return res, nil
}

// ResetOptions state what ResetMark writes in place of a damaged mark.
type ResetOptions struct {
	// Token is the lifecycle that holds the volume and its current
	// generation, as the cluster records them: the metadata.uid and
	// spec.publicationGeneration of the volume's PillarVolumeState.
	Token Token
	// Ended writes Token's lifecycle as ended (a tombstone) instead of
	// active: for a PillarVolumeState that is being deleted, whose End the
	// damaged mark may have recorded.
	Ended bool
	// AcceptLoss lets the reset go ahead although the damaged file's list
	// of ended lifecycles could not be read back intact. See ResetMark for
	// exactly what that gives up.
	AcceptLoss bool
	// DryRun checks everything and reports what would be done, writing
	// nothing.
	DryRun bool
}

// MarkReset reports what ResetMark did, or would do in a dry run.
type MarkReset struct {
	VolumeID string
	Path     string
	// Damage is why the mark could not be read.
	Damage error
	// Salvage is what could be read back from the damaged file; nil if
	// nothing could.
	Salvage *Salvage
	// HistoryIntact reports that the damaged file's checksum matched and
	// its list of ended lifecycles was read whole: no ended lifecycle was
	// lost with it.
	HistoryIntact bool
	// Ledgered are the lifecycles read back from the damaged file, other
	// than Token's, that were added to the ledger as ended.
	Ledgered []string
	// Notes are findings in the damaged file that did not stop the reset.
	Notes []string
	// Kept is where the damaged file was kept, under DamagedDir; empty in a
	// dry run.
	Kept string
	// Mark is the mark written (in a dry run: that would be written).
	Mark *Mark
}

// ResetMark replaces volume volumeID's unreadable mark (MARK_UNREADABLE)
// with a fresh one for the lifecycle and generation the operator states in
// opts.Token, read from the volume's PillarVolumeState. It refuses
// (ErrRecoveryRefused) a mark that can be read (ResetMark never switches a
// mark to another lifecycle), a volume without a mark file, a file of a
// newer format version, and a lifecycle the ledger lists as retired.
//
// What stays safe: the new mark is active(u, g) (or, with opts.Ended,
// ended(u, g) with u in its history), so another lifecycle is refused with
// LIFECYCLE_REPLACED while u holds the volume (LIFECYCLE_ENDED if it is in
// the ledger), and u below g with STALE_GENERATION. The controller
// advances the PillarVolumeState's generation by compare-and-swap before
// it sends a request, so the damaged mark's generation was at most g: a
// request the damaged mark refused as stale is still refused.
//
// What is lost is the damaged mark's history: lifecycles of this volume
// that ended before the damage. As many as can be read back from the file
// (Salvage) are first added to the ledger, so they stay refused. One that
// cannot be read back is refused while u is active (LIFECYCLE_REPLACED),
// but once u ends it would be admitted as a new lifecycle (rule 16) if a
// controller still sent its requests. ResetMark therefore refuses unless
// the history was read back intact (checksum matched) or
// opts.AcceptLoss is set.
//
// The salvaged fields are also checked against opts.Token, to refuse
// rather than guess: if the damaged file lists u as ended, only opts.Ended
// is accepted (an active mark would reopen an ended lifecycle); if it
// records a higher generation for u with a valid checksum, the stated
// generation is wrong.
//
// The damaged file is kept under DamagedDir (a hard link, so even a file
// whose blocks cannot be read is kept) before the new mark replaces it
// atomically; a crash at any point leaves either the damaged mark (still
// refusing everything) or the new one, never no mark.
func (s *Store) ResetMark(ctx context.Context, volumeID string, opts ResetOptions) (*MarkReset, error) {
	const op = "reset mark"
	u, g := opts.Token.UID, opts.Token.Generation
	path, done, err := s.beginRecovery(ctx, op, volumeID, u)
	if err != nil {
		return nil, err
	}
	defer done()
	fail := func(err error) (*MarkReset, error) {
		return nil, &Error{Op: op, VolumeID: volumeID, Path: path, Err: err}
	}

	res := &MarkReset{VolumeID: volumeID, Path: path}
	data, err := readMarkData(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(refuseRecovery("the volume has no mark file; there is nothing to reset"))
	case err != nil:
		res.Damage = err // unreadable blocks: nothing to salvage
	default:
		if v, newer := newerVersion(data, markMagic, markVersion); newer {
			return fail(refuseRecovery("the mark is in format version %d, written by a later release than this one (version %d): run that release's pillar-agent instead", v, markVersion))
		}
		m, err := decodeMarkOf(volumeID, data)
		if err == nil {
			return fail(refuseRecovery("the mark is readable (%v): ResetMark replaces only an unreadable mark; to end its lifecycle use EndLifecycle", m))
		}
		res.Damage = err
		res.Salvage = salvageMark(data)
	}
	l := s.ledger.Load()
	if l.contains(fingerprintOf(volumeID, u)) {
		return fail(refuseRecovery("lifecycle %q of this volume is in the ledger of retired lifecycles: it ended and can never hold the volume again", u))
	}

	// What the damaged file says, when it says it about this volume.
	var ended []string
	if sv := res.Salvage; sv != nil && sv.VolumeID == volumeID {
		res.HistoryIntact = sv.ChecksumOK && sv.Complete
		endedU := sv.Phase == PhaseEnded && sv.UID == u
		for _, e := range sv.History {
			switch {
			case e.UID == u:
				endedU = true
			case validateUID(e.UID) == nil && !slices.Contains(ended, e.UID):
				ended = append(ended, e.UID)
			}
		}
		if sv.UID != u && validateUID(sv.UID) == nil && !slices.Contains(ended, sv.UID) {
			// The file names another lifecycle as the mark's own. The
			// operator states u holds the volume, so that one must never
			// write again, exactly as EndLifecycle would make it.
			ended = append(ended, sv.UID)
		}
		if endedU && !opts.Ended {
			return fail(refuseRecovery("the damaged mark records lifecycle %q as ended; an active mark would let it write again. If its PillarVolumeState is being deleted, reset it as ended", u))
		}
		if sv.UID == u && sv.Generation > g {
			if sv.ChecksumOK {
				return fail(refuseRecovery("the damaged mark records generation %d for lifecycle %q, above the stated %d; the PillarVolumeState's generation is never lower than one the agent accepted: read it again", sv.Generation, u, g))
			}
			res.Notes = append(res.Notes, fmt.Sprintf("the damaged file reads generation %d for lifecycle %q, above the stated %d; its checksum fails, so that number is not trusted", sv.Generation, u, g))
		}
	} else if sv != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("the damaged file names volume %q, not this one: nothing in it is used", sv.VolumeID))
	}
	res.Ledgered = ended
	if !res.HistoryIntact && !opts.AcceptLoss && !opts.DryRun {
		return fail(refuseRecovery("the damaged mark's list of ended lifecycles could not be read back intact (%d read back): a lifecycle of this volume that ended before the damage and is not among them would be admitted again once lifecycle %q ends; accept that loss explicitly to go ahead", len(ended), u))
	}

	now := s.now()
	res.Mark = &Mark{Phase: PhaseActive, UID: u, Generation: g}
	if opts.Ended {
		res.Mark = &Mark{Phase: PhaseEnded, UID: u, Generation: g, History: []EndedLifecycle{{UID: u, At: now}}}
	}
	if opts.DryRun {
		return res, nil
	}
	if res.Kept, err = keepDamaged(s.d, s.dir, filepath.Base(path), now); err != nil {
		return fail(fmt.Errorf("keeping the damaged file: %w", err))
	}
	fps := make([]fingerprint, len(ended))
	for i, uid := range ended {
		fps[i] = fingerprintOf(volumeID, uid)
	}
	// The ledger first: until the new mark replaces the damaged one, the
	// volume stays refused, so a crash in between loses nothing.
	if err := s.addToLedger(fps); err != nil {
		return fail(err)
	}
	if err := s.writeMark(ctx, volumeID, path, res.Mark.clone()); err != nil {
		return fail(err)
	}
	return res, nil
}

// LedgerReset reports what ResetLedger did, or would do in a dry run.
type LedgerReset struct {
	Path string
	// Damage is why the ledger could not be read.
	Damage error
	// Announced is the number of lifecycles the damaged file's header
	// states, or -1 if it has no recognisable header.
	Announced int64
	// Kept is the number of lifecycles the new ledger holds: every whole
	// record of the damaged file.
	Kept int
	// KeptPath is where the damaged file was kept, under DamagedDir; empty
	// in a dry run.
	KeptPath string
}

// LedgerResetOptions say what ResetLedger may do.
type LedgerResetOptions struct {
	// AcceptLoss must be set for ResetLedger to write: a damaged ledger
	// always loses what its damaged records held. See ResetLedger.
	AcceptLoss bool
	// DryRun checks everything and reports what would be done, writing
	// nothing.
	DryRun bool
	// Now stamps the name of the kept file; time.Now if nil.
	Now func() time.Time
}

// ResetLedger replaces the unreadable ledger of retired lifecycles of the
// store in dir, which makes Open fail, by one that holds every whole
// record of the damaged file. It takes the directory's lock as Open does,
// retrying until ctx is done and then failing with an error that wraps
// ErrLocked (so pass a context with a deadline), and refuses
// (ErrRecoveryRefused) when the ledger is missing, readable, or of a newer
// format version.
//
// The ledger's format has one checksum over the whole file and no
// structure a damaged record could be recognised by, so the new ledger
// keeps every whole 16-byte record, damaged or not: a damaged fingerprint
// can only refuse a lifecycle that never existed. What a damaged or
// truncated record held is lost: that retired lifecycle, whose volume the
// fingerprint does not name, is no longer known to have ended, and if a
// controller still sent its requests it would be admitted as a new
// lifecycle of its volume when that volume has no mark or a tombstone.
// ResetLedger therefore writes only with opts.AcceptLoss.
//
// The damaged file is kept under DamagedDir before the new ledger replaces
// it atomically.
func ResetLedger(ctx context.Context, dir string, opts LedgerResetOptions) (*LedgerReset, error) {
	const op = "reset ledger"
	path := filepath.Join(dir, ledgerFileName)
	fail := func(err error) (*LedgerReset, error) { return nil, &Error{Op: op, Path: path, Err: err} }
	if dir == "" {
		return fail(errors.New("empty directory name"))
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	d, err := lockDir(ctx, dir)
	if err != nil {
		return fail(err)
	}
	defer d.Close() // also drops the flock

	res := &LedgerReset{Path: path, Announced: -1}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(refuseRecovery("there is no ledger; there is nothing to reset"))
	case err != nil:
		res.Damage = err // unreadable blocks: no record to keep
	default:
		if v, newer := newerVersion(data, ledgerMagic, ledgerVersion); newer {
			return fail(refuseRecovery("the ledger is in format version %d, written by a later release than this one (version %d): run that release's pillar-agent instead", v, ledgerVersion))
		}
		if _, res.Damage = decodeLedger(data); res.Damage == nil {
			return fail(refuseRecovery("the ledger is readable; there is nothing to reset"))
		}
	}
	l, announced := salvageLedger(data)
	res.Announced, res.Kept = announced, len(l.fps)
	if opts.DryRun {
		return res, nil
	}
	if !opts.AcceptLoss {
		return fail(refuseRecovery("a damaged ledger loses the retired lifecycles its damaged records held (the file announces %d, %d whole records remain); accept that loss explicitly to go ahead", announced, len(l.fps)))
	}
	if res.KeptPath, err = keepDamaged(d, dir, ledgerFileName, now()); err != nil {
		return fail(fmt.Errorf("keeping the damaged file: %w", err))
	}
	if err := writeFileAtomic(d, dir, ledgerFileName, l.encode()); err != nil {
		return fail(err)
	}
	return res, nil
}

// keepDamaged hard-links dir/name into DamagedDir under a name stamped
// with at, so the file stays there when the store replaces it, and makes
// the link durable. A link needs no read of the file, so a file with
// unreadable blocks is kept as well.
func keepDamaged(d *os.File, dir, name string, at time.Time) (string, error) {
	kd := filepath.Join(dir, DamagedDir)
	if err := os.Mkdir(kd, 0o700); err == nil {
		if err := syncDir(d); err != nil {
			return "", err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	// A mark's name is at most maxNameLen (235) bytes: with the stamp and
	// a counter the kept name still fits NAME_MAX.
	base := name + "." + at.UTC().Format("20060102T150405Z")
	for i := 1; ; i++ {
		target := filepath.Join(kd, base)
		if i > 1 {
			target += "-" + strconv.Itoa(i)
		}
		err := os.Link(filepath.Join(dir, name), target)
		switch {
		case err == nil:
			kdir, err := os.Open(kd)
			if err != nil {
				return "", err
			}
			defer kdir.Close()
			return target, syncDir(kdir)
		case errors.Is(err, fs.ErrExist) && i < 9:
			continue
		default:
			return "", err
		}
	}
}

// beginRecovery makes the checks every recovery call op on lifecycle uid
// of volumeID makes first (the store open, the volume ID and the UID well
// formed) and takes the volume's lock, holding the store open until done
// is called.
func (s *Store) beginRecovery(ctx context.Context, op, volumeID, uid string) (path string, done func(), err error) {
	s.life.RLock()
	defer func() {
		if err != nil {
			s.life.RUnlock()
		}
	}()
	if s.closed {
		return "", nil, &Error{Op: op, VolumeID: volumeID, Path: s.dir, Err: ErrClosed}
	}
	if err := ValidateVolumeID(volumeID); err != nil {
		return "", nil, &Error{Op: op, VolumeID: volumeID, Reason: ReasonMalformed, Err: err}
	}
	if err := validateUID(uid); err != nil {
		return "", nil, &Error{Op: op, VolumeID: volumeID, Reason: ReasonMalformed, Err: fmt.Errorf("%w: %w", ErrMalformed, err)}
	}
	path = s.path(volumeID)
	unlock, err := s.locks.lock(ctx, volumeID)
	if err != nil {
		return "", nil, &Error{Op: op, VolumeID: volumeID, Path: path, Err: err}
	}
	return path, func() { unlock(); s.life.RUnlock() }, nil
}

// AdoptOptions state the lifecycle Adopt writes for a volume whose mark was
// lost.
type AdoptOptions struct {
	// Token is the lifecycle that holds the volume and its current
	// generation, as the cluster records them: the metadata.uid and
	// spec.publicationGeneration of the volume's PillarVolumeState.
	Token Token
	// Ended writes Token's lifecycle as ended (a tombstone): for a
	// PillarVolumeState that is being deleted, so that its DeleteVolume,
	// retried, is admitted (rule 14) and nothing else of it is.
	Ended bool
	// DryRun checks everything and reports what would be written, writing
	// nothing.
	DryRun bool
}

// Adopt writes the mark of a volume that exists on the storage node without
// one (refused with UNMARKED, rule 19): the lifecycle and generation the
// operator reads from the volume's PillarVolumeState become the mark, as if
// the lost mark had held them. It refuses (ErrRecoveryRefused) a volume
// that has a mark file, readable or not (EndLifecycle and ResetMark are for
// those), and a lifecycle the ledger lists as retired. It returns the mark
// written (in a dry run: that would be).
//
// What stays safe: from then on the volume is fenced as before its mark
// was lost, for the lifecycle the cluster holds. What the lost mark knew
// and the cluster does not (lifecycles of this volume ID that ended before,
// unless the ledger has them) is gone with it; pillar-controller never
// reuses a volume ID for a new PersistentVolume, so no such lifecycle
// comes back.
func (s *Store) Adopt(ctx context.Context, volumeID string, opts AdoptOptions) (*Mark, error) {
	const op = "adopt"
	u, g := opts.Token.UID, opts.Token.Generation
	path, done, err := s.beginRecovery(ctx, op, volumeID, u)
	if err != nil {
		return nil, err
	}
	defer done()
	fail := func(err error) (*Mark, error) {
		return nil, &Error{Op: op, VolumeID: volumeID, Path: path, Err: err}
	}
	switch _, err := os.Lstat(path); {
	case err == nil:
		return fail(refuseRecovery("the volume has a mark file; adopt writes only a missing mark (a damaged one is replaced with ResetMark, an active lifecycle ended with EndLifecycle)"))
	case !errors.Is(err, fs.ErrNotExist):
		return fail(err)
	}
	if s.ledger.Load().contains(fingerprintOf(volumeID, u)) {
		return fail(refuseRecovery("lifecycle %q of this volume is in the ledger of retired lifecycles: it ended and can never hold the volume again", u))
	}
	if g == 0 {
		return fail(refuseRecovery("generation 0: read spec.publicationGeneration from the volume's PillarVolumeState"))
	}
	m := &Mark{Phase: PhaseActive, UID: u, Generation: g}
	if opts.Ended {
		m = &Mark{Phase: PhaseEnded, UID: u, Generation: g, History: []EndedLifecycle{{UID: u, At: s.now()}}}
	}
	if opts.DryRun {
		return m, nil
	}
	if err := s.writeMark(ctx, volumeID, path, m.clone()); err != nil {
		return fail(err)
	}
	return m, nil
}
