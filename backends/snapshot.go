package backends

import (
	"context"
	"time"
)

// Snapshotter is implemented by the backends whose stores take snapshots
// and make volumes from them and from other volumes: ZFS, and LVM with a
// thin pool. A store that cannot (linear LVM) answers every method with
// ErrUnsupported.
//
// A snapshot belongs to the snapshot ID that owns it (a ZFS user property,
// an LVM tag) and is found by that ID and its source volume's ID. The
// rules of volumes hold for snapshots: every method is idempotent, input
// is validated first, nothing not marked as the one asked for is ever
// destroyed.
//
// Deletion in any order: a source volume, its snapshots and the volumes
// made from them can be deleted in any order. Each delete succeeds at once
// and the thing deleted is gone for Get, List and ListSnapshots; where the
// store still needs its data for another volume (a ZFS clone's origin),
// the backend keeps it, hidden, and destroys it with the last thing that
// needs it, so the space comes back then.
type Snapshotter interface {
	// CanSnapshot is nil when the store takes snapshots, and
	// ErrUnsupported, naming the store's type, when it does not. It runs
	// no command, so a caller can refuse before it changes anything.
	CanSnapshot() error

	// CreateSnapshot takes a snapshot of the volume owned by sourceID,
	// owned by id. A snapshot id of sourceID that exists already is
	// returned; a snapshot or volume of that name that id does not own
	// is ErrConflict; a missing source is ErrNotFound.
	CreateSnapshot(ctx context.Context, id, sourceID string) (*Snapshot, error)

	// DeleteSnapshot deletes the snapshot id of sourceID. A missing one is
	// success; one that id does not own is ErrConflict and is left alone.
	DeleteSnapshot(ctx context.Context, id, sourceID string) error

	// GetSnapshot returns the snapshot id of sourceID, or ErrNotFound.
	GetSnapshot(ctx context.Context, id, sourceID string) (*Snapshot, error)

	// ListSnapshots returns every snapshot of the store owned by some
	// snapshot ID, sorted by source and ID.
	ListSnapshots(ctx context.Context) ([]Snapshot, error)

	// CreateFromSnapshot makes the volume id with the content of the
	// snapshot snapshotID of sourceID, of at least sizeBytes (rounded up)
	// and never smaller than the snapshot: less is ErrShrink. A retried
	// call returns the volume it made; a volume id that exists with other
	// content or another size is ErrConflict.
	CreateFromSnapshot(ctx context.Context, id, snapshotID, sourceID string, sizeBytes int64) (*Volume, error)

	// CreateFromVolume makes the volume id with the content the volume
	// sourceID has at the moment of the call (a clone), under the rules
	// of CreateFromSnapshot.
	CreateFromVolume(ctx context.Context, id, sourceID string, sizeBytes int64) (*Volume, error)
}

// Snapshot is one backend snapshot.
type Snapshot struct {
	// ID is the snapshot ID that owns it.
	ID string
	// SourceID is the ID of the volume it was taken of.
	SourceID string
	// Name is the backend's name for it: POOL/DATASET/SOURCE@ID for ZFS,
	// VG/LV for LVM.
	Name string
	// SizeBytes is the size of the volume it was taken of, at that time:
	// the smallest volume it can be restored to.
	SizeBytes int64
	// CreationTime is when it was taken, to the second.
	CreationTime time.Time
}
