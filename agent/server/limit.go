package server

import (
	"context"
	"fmt"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
)

// DefaultStoreConcurrency is how many backend calls of each kind (changes,
// look-ups) run at once per store when Config.StoreConcurrency is zero.
// LVM serializes metadata updates on its volume-group lock and ZFS its
// changes on the pool's transaction groups, so more processes in parallel
// mostly wait for each other; but each of them holds a timeout
// (Config.CommandTimeout) and output pipes, and a hundred of them on a
// small node starve each other past those limits.
const DefaultStoreConcurrency = 4

// limited is a backend whose calls wait for one of a fixed number of
// slots: changes (create, delete, expand, snapshots and clones) for one of
// n change slots, look-ups (get, list, capacity, device path, snapshot
// reads) for one of n look-up slots of their own, so that a look-up, such
// as the device path of a volume just created or an export's check, never
// queues behind a burst of creates waiting for theirs. Gets of a backend
// that shares their commands (backends.GetSharer: ZFS lists the zvols
// asked for at once in one zfs list) take no slot: the backend runs one
// such command at a time. Waiting honours
// the caller's context, also inside an admitted act that no longer follows
// it (waitContext), so a caller whose deadline passes in the queue gets
// DEADLINE_EXCEEDED without running anything; the command, once it has its
// slot, runs under the context it was given.
type limited struct {
	b                backends.Backend
	changes, lookups chan struct{}
}

func limit(b backends.Backend, n int) *limited {
	return &limited{b: b, changes: make(chan struct{}, n), lookups: make(chan struct{}, n)}
}

// change and lookup wait for a slot of their kind and return its release.
func (l *limited) change(ctx context.Context, op string) (func(), error) {
	return acquire(ctx, l.changes, op)
}

func (l *limited) lookup(ctx context.Context, op string) (func(), error) {
	return acquire(ctx, l.lookups, op)
}

func acquire(ctx context.Context, slots chan struct{}, op string) (func(), error) {
	wait := waitContext(ctx)
	if wait.Err() == nil { // a caller gone already starts nothing, though a slot is free
		select {
		case slots <- struct{}{}:
			return func() { <-slots }, nil
		case <-wait.Done():
		}
	}
	return nil, fmt.Errorf("%s: waiting for a free slot of the store: %w", op, wait.Err())
}

func (l *limited) Create(ctx context.Context, id string, size int64) (*backends.Volume, error) {
	began := time.Now()
	release, err := l.change(ctx, "create")
	if err != nil {
		return nil, err
	}
	defer release()
	ran := time.Now()
	v, err := l.b.Create(ctx, id, size)
	if t, ok := ctx.Value(createTimesKey{}).(*createTimes); ok {
		t.slotWait, t.create = ran.Sub(began), time.Since(ran)
	}
	return v, err
}

// createTimes is where a CreateVolume's time went, for its log line: how
// long its backend create waited for one of the store's change slots,
// and how long the backend's create then took. Under a burst the first
// says how many creates were ahead, the second how fast the pool makes
// volumes.
type createTimes struct{ slotWait, create time.Duration }

type createTimesKey struct{}

// withCreateTimes returns ctx carrying t, which limited.Create fills in.
func withCreateTimes(ctx context.Context, t *createTimes) context.Context {
	return context.WithValue(ctx, createTimesKey{}, t)
}

func (l *limited) Delete(ctx context.Context, id string) error {
	release, err := l.change(ctx, "delete")
	if err != nil {
		return err
	}
	defer release()
	return l.b.Delete(ctx, id)
}

func (l *limited) Expand(ctx context.Context, id string, size int64) (*backends.Volume, error) {
	release, err := l.change(ctx, "expand")
	if err != nil {
		return nil, err
	}
	defer release()
	return l.b.Expand(ctx, id, size)
}

func (l *limited) Get(ctx context.Context, id string) (*backends.Volume, error) {
	// A backend that shares the commands of Gets made at once runs one
	// at a time itself: a slot would only cut its batches short.
	if s, ok := l.b.(backends.GetSharer); ok && s.SharesGets() {
		return l.b.Get(ctx, id)
	}
	release, err := l.lookup(ctx, "get")
	if err != nil {
		return nil, err
	}
	defer release()
	return l.b.Get(ctx, id)
}

func (l *limited) List(ctx context.Context) ([]backends.Volume, error) {
	release, err := l.lookup(ctx, "list")
	if err != nil {
		return nil, err
	}
	defer release()
	return l.b.List(ctx)
}

func (l *limited) Capacity(ctx context.Context) (*backends.Capacity, error) {
	release, err := l.lookup(ctx, "capacity")
	if err != nil {
		return nil, err
	}
	defer release()
	return l.b.Capacity(ctx)
}

func (l *limited) DevicePath(ctx context.Context, id string) (string, error) {
	release, err := l.lookup(ctx, "device path")
	if err != nil {
		return "", err
	}
	defer release()
	return l.b.DevicePath(ctx, id)
}

// snapshotter returns the store's snapshot methods, each behind a slot,
// or ErrUnsupported's answers from a backend that has none.
func (l *limited) snapshotter() backends.Snapshotter {
	if sn, ok := l.b.(backends.Snapshotter); ok {
		return limitedSnapshots{l: l, sn: sn}
	}
	return limitedSnapshots{l: l, sn: unsupported{}}
}

type limitedSnapshots struct {
	l  *limited
	sn backends.Snapshotter
}

// CanSnapshot runs no command, so it takes no slot.
func (s limitedSnapshots) CanSnapshot() error { return s.sn.CanSnapshot() }

func (s limitedSnapshots) CreateSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	release, err := s.l.change(ctx, "create snapshot")
	if err != nil {
		return nil, err
	}
	defer release()
	return s.sn.CreateSnapshot(ctx, id, sourceID)
}

func (s limitedSnapshots) DeleteSnapshot(ctx context.Context, id, sourceID string) error {
	release, err := s.l.change(ctx, "delete snapshot")
	if err != nil {
		return err
	}
	defer release()
	return s.sn.DeleteSnapshot(ctx, id, sourceID)
}

func (s limitedSnapshots) GetSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	release, err := s.l.lookup(ctx, "get snapshot")
	if err != nil {
		return nil, err
	}
	defer release()
	return s.sn.GetSnapshot(ctx, id, sourceID)
}

func (s limitedSnapshots) ListSnapshots(ctx context.Context) ([]backends.Snapshot, error) {
	release, err := s.l.lookup(ctx, "list snapshots")
	if err != nil {
		return nil, err
	}
	defer release()
	return s.sn.ListSnapshots(ctx)
}

func (s limitedSnapshots) CreateFromSnapshot(ctx context.Context, id, snapshotID, sourceID string, size int64) (*backends.Volume, error) {
	release, err := s.l.change(ctx, "create from snapshot")
	if err != nil {
		return nil, err
	}
	defer release()
	return s.sn.CreateFromSnapshot(ctx, id, snapshotID, sourceID, size)
}

func (s limitedSnapshots) CreateFromVolume(ctx context.Context, id, sourceID string, size int64) (*backends.Volume, error) {
	release, err := s.l.change(ctx, "create from volume")
	if err != nil {
		return nil, err
	}
	defer release()
	return s.sn.CreateFromVolume(ctx, id, sourceID, size)
}

// unsupported is the Snapshotter of a backend without snapshots.
type unsupported struct{}

var errNoSnapshots = fmt.Errorf("this backend takes no snapshots: %w", backends.ErrUnsupported)

func (unsupported) CanSnapshot() error { return errNoSnapshots }
func (unsupported) CreateSnapshot(context.Context, string, string) (*backends.Snapshot, error) {
	return nil, errNoSnapshots
}
func (unsupported) DeleteSnapshot(context.Context, string, string) error { return errNoSnapshots }
func (unsupported) GetSnapshot(context.Context, string, string) (*backends.Snapshot, error) {
	return nil, errNoSnapshots
}
func (unsupported) ListSnapshots(context.Context) ([]backends.Snapshot, error) {
	return nil, errNoSnapshots
}
func (unsupported) CreateFromSnapshot(context.Context, string, string, string, int64) (*backends.Volume, error) {
	return nil, errNoSnapshots
}
func (unsupported) CreateFromVolume(context.Context, string, string, int64) (*backends.Volume, error) {
	return nil, errNoSnapshots
}
