package lvm

import (
	"context"
	"slices"
	"strings"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/internal/admit"
	"github.com/pillar-csi/pillar-csi/backends/internal/errs"
)

// SnapshotTagPrefix starts the tag that makes a thin snapshot ours: the
// snapshot ID follows it. SourceTagPrefix starts the tag naming the
// volume it was taken of, which stays when that volume is removed (a thin
// snapshot does not depend on its origin; lvs then reports no origin).
const (
	SnapshotTagPrefix = "pillar-csi.io_snapshot-id_"
	SourceTagPrefix   = "pillar-csi.io_snapshot-of_"
)

var _ backends.Snapshotter = (*Backend)(nil)

// snapshots refuses a linear store: its snapshots would be old-style
// copy-on-write LVs of a fixed size that fail when it fills up.
// CanSnapshot implements backends.Snapshotter: a thin store can, a linear
// one cannot.
func (b *Backend) CanSnapshot() error { return b.snapshots() }

func (b *Backend) snapshots() error {
	if b.thinPool == "" {
		return errs.New(backends.ErrUnsupported, nil, "store %s is linear LVM: snapshots and clones need an LVM thin store (a thin pool)", b.store)
	}
	return nil
}

func (b *Backend) snapshot(l *lv) *backends.Snapshot {
	return &backends.Snapshot{ID: l.tagged(SnapshotTagPrefix), SourceID: l.tagged(SourceTagPrefix), Name: b.vg + "/" + l.name,
		SizeBytes: l.size, CreationTime: l.created}
}

// CreateSnapshot implements backends.Snapshotter: a thin snapshot, which
// shares the source's blocks and keeps LVM's activation skip flag (it is
// never activated; a volume made from it is).
func (b *Backend) CreateSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	s, err := b.createSnapshot(ctx, id, sourceID)
	return s, errs.Wrap("create snapshot", b.store, id, err)
}

func (b *Backend) createSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	if err := validateIDs(id, sourceID); err != nil {
		return nil, err
	}
	if err := b.snapshots(); err != nil {
		return nil, err
	}
	name := LVName(b.vg, id)
	var src *lv
	res, err := b.admit.Reserve(func(reserved int64) (int64, error) {
		lvs, pool, err := b.listPool(ctx)
		if err != nil {
			return 0, err
		}
		if find(lvs, name) != nil {
			return 0, admit.ErrMade
		}
		if src = find(lvs, LVName(b.vg, sourceID)); src == nil {
			return 0, errs.New(backends.ErrNotFound, nil, "volume %s does not exist", sourceID)
		}
		if err := b.owned(sourceID, src); err != nil {
			return 0, err
		}
		// A thin snapshot is promised the source's size like any thin LV.
		if avail := b.thinAvailable(lvs, pool) - reserved; src.size > avail {
			return 0, errs.New(backends.ErrNoSpace, nil, "a snapshot of %d bytes, %d available in thin pool %s under overcommit ratio %g", src.size, avail, b.store, b.ratio)
		}
		return src.size, nil
	})
	if err == admit.ErrMade {
		return b.madeSnapshot(ctx, id, sourceID)
	}
	if err != nil {
		return nil, err
	}
	err = admit.ErrPanicked
	defer func() { res.End(err, b.last.take) }()
	_, err = b.lvm(ctx, "lvcreate", "--yes", "--snapshot", "--setactivationskip", "y", "--name", name,
		"--addtag", SnapshotTagPrefix+id, "--addtag", SourceTagPrefix+sourceID, b.vg+"/"+src.name)
	if err != nil && !errs.StderrContains(err, "already exists in volume group") {
		return nil, classify(err)
	}
	return b.madeSnapshot(ctx, id, sourceID)
}

// madeSnapshot returns the snapshot id of sourceID that lvcreate made,
// now or before a retry, with the tags it copied from its origin removed.
func (b *Backend) madeSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	l, err := b.lvByName(ctx, LVName(b.vg, id), snapFields)
	if err != nil {
		return nil, err
	}
	s, err := b.sameSnapshot(l, id, sourceID)
	if err != nil {
		return nil, err
	}
	return s, b.dropCopiedTags(ctx, l, SnapshotTagPrefix+id, SourceTagPrefix+sourceID)
}

// dropCopiedTags removes from a new snapshot or clone l every tag of this
// package but keep: LVM copies the origin's tags to a snapshot, and a
// volume tag on a snapshot would make it look like the volume.
func (b *Backend) dropCopiedTags(ctx context.Context, l *lv, keep ...string) error {
	var args []string
	for _, t := range l.tags {
		if strings.HasPrefix(t, "pillar-csi.io_") && !slices.Contains(keep, t) {
			args = append(args, "--deltag", t)
		}
	}
	if len(args) == 0 {
		return nil
	}
	if _, err := b.lvm(ctx, "lvchange", append(args, b.vg+"/"+l.name)...); err != nil {
		return classify(err)
	}
	return nil
}

// sameSnapshot returns the snapshot l if it is id's of sourceID.
func (b *Backend) sameSnapshot(l *lv, id, sourceID string) (*backends.Snapshot, error) {
	if !slices.Contains(l.tags, SnapshotTagPrefix+id) {
		return nil, errs.New(backends.ErrConflict, nil, "%s/%s exists and is not snapshot %s (no tag %s%s)", b.vg, l.name, id, SnapshotTagPrefix, id)
	}
	if !slices.Contains(l.tags, SourceTagPrefix+sourceID) {
		return nil, errs.New(backends.ErrConflict, nil, "snapshot %s exists of volume %q, not of %s", id, l.tagged(SourceTagPrefix), sourceID)
	}
	s := b.snapshot(l)
	s.ID, s.SourceID = id, sourceID
	return s, nil
}

// DeleteSnapshot implements backends.Snapshotter. A thin snapshot shares
// blocks with its origin and the volumes made from it but depends on none
// of them: it goes at once, in any order.
func (b *Backend) DeleteSnapshot(ctx context.Context, id, sourceID string) error {
	return errs.Wrap("delete snapshot", b.store, id, b.deleteSnapshot(ctx, id, sourceID))
}

func (b *Backend) deleteSnapshot(ctx context.Context, id, sourceID string) error {
	if err := validateIDs(id, sourceID); err != nil {
		return err
	}
	if err := b.snapshots(); err != nil {
		return err
	}
	return b.removeTagged(ctx, LVName(b.vg, id), []string{SnapshotTagPrefix + id, SourceTagPrefix + sourceID}, func() error {
		_, err := b.getSnapshot(ctx, id, sourceID)
		return err
	})
}

// GetSnapshot implements backends.Snapshotter.
func (b *Backend) GetSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	if err := validateIDs(id, sourceID); err != nil {
		return nil, errs.Wrap("get snapshot", b.store, id, err)
	}
	if err := b.snapshots(); err != nil {
		return nil, errs.Wrap("get snapshot", b.store, id, err)
	}
	l, err := b.getSnapshot(ctx, id, sourceID)
	if err != nil {
		return nil, errs.Wrap("get snapshot", b.store, id, err)
	}
	return b.snapshot(l), nil
}

func (b *Backend) getSnapshot(ctx context.Context, id, sourceID string) (*lv, error) {
	l, err := b.lvByName(ctx, LVName(b.vg, id), snapFields)
	if err != nil {
		return nil, err
	}
	if _, err := b.sameSnapshot(l, id, sourceID); err != nil {
		return nil, err
	}
	return l, nil
}

// ListSnapshots implements backends.Snapshotter.
func (b *Backend) ListSnapshots(ctx context.Context) ([]backends.Snapshot, error) {
	ss, err := b.listSnapshots(ctx)
	return ss, errs.Wrap("list snapshots", b.store, "", err)
}

func (b *Backend) listSnapshots(ctx context.Context) ([]backends.Snapshot, error) {
	if err := b.snapshots(); err != nil {
		return nil, err
	}
	out, err := b.report(ctx, "lvs", snapFields, b.vg)
	if err != nil {
		return nil, classify(err)
	}
	lvs, err := parseLVs(out)
	if err != nil {
		return nil, err
	}
	ss := []backends.Snapshot{}
	for i := range lvs {
		id, ok := b.ownerByName(&lvs[i], SnapshotTagPrefix)
		if !ok {
			continue
		}
		s := b.snapshot(&lvs[i])
		s.ID = id
		if backends.ValidateVolumeID(s.SourceID) == nil {
			ss = append(ss, *s)
		}
	}
	slices.SortFunc(ss, func(a, b backends.Snapshot) int {
		return strings.Compare(a.SourceID+"\x00"+a.ID, b.SourceID+"\x00"+b.ID)
	})
	return ss, nil
}

// CreateFromSnapshot implements backends.Snapshotter: a thin snapshot of
// the snapshot, activated, which is a thin volume like any other.
func (b *Backend) CreateFromSnapshot(ctx context.Context, id, snapshotID, sourceID string, sizeBytes int64) (*backends.Volume, error) {
	v, err := b.createFrom(ctx, id, sizeBytes, func(lvs []lv) (*lv, error) {
		l := find(lvs, LVName(b.vg, snapshotID))
		if l == nil {
			return nil, errs.New(backends.ErrNotFound, nil, "snapshot %s does not exist", snapshotID)
		}
		_, err := b.sameSnapshot(l, snapshotID, sourceID)
		return l, err
	}, snapshotID, sourceID)
	return v, errs.Wrap("create from snapshot", b.store, id, err)
}

// CreateFromVolume implements backends.Snapshotter: a thin snapshot of the
// volume, activated.
func (b *Backend) CreateFromVolume(ctx context.Context, id, sourceID string, sizeBytes int64) (*backends.Volume, error) {
	v, err := b.createFrom(ctx, id, sizeBytes, func(lvs []lv) (*lv, error) {
		l := find(lvs, LVName(b.vg, sourceID))
		if l == nil {
			return nil, errs.New(backends.ErrNotFound, nil, "volume %s does not exist", sourceID)
		}
		return l, b.owned(sourceID, l)
	}, sourceID)
	return v, errs.Wrap("create from volume", b.store, id, err)
}

// createFrom makes volume id as a thin snapshot of the LV origin picks,
// grown to sizeBytes when that is more than the origin's size.
func (b *Backend) createFrom(ctx context.Context, id string, sizeBytes int64, origin func([]lv) (*lv, error), ids ...string) (*backends.Volume, error) {
	if err := validateIDs(append([]string{id}, ids...)...); err != nil {
		return nil, err
	}
	if err := backends.ValidateSize(sizeBytes); err != nil {
		return nil, err
	}
	if err := b.snapshots(); err != nil {
		return nil, err
	}
	v, err := b.cloneLV(ctx, id, sizeBytes, origin)
	if err != nil || v.SizeBytes >= sizeBytes {
		return v, err
	}
	// Grown after the lock is released: Expand admits the growth itself,
	// and a retry after a crash in between finds the volume and grows it.
	return b.expand(ctx, id, sizeBytes)
}

// cloneLV makes volume id as an activated thin snapshot of the LV origin
// picks, at the origin's size, and returns it.
func (b *Backend) cloneLV(ctx context.Context, id string, sizeBytes int64, origin func([]lv) (*lv, error)) (*backends.Volume, error) {
	name := LVName(b.vg, id)
	var o, retried *lv
	res, err := b.admit.Reserve(func(reserved int64) (int64, error) {
		lvs, pool, err := b.listPool(ctx)
		if err != nil {
			return 0, err
		}
		if retried = find(lvs, name); retried != nil {
			return 0, admit.ErrMade
		}
		if err := b.zeroing(pool); err != nil {
			return 0, err
		}
		if o, err = origin(lvs); err != nil {
			return 0, err
		}
		want, err := backends.RoundUp(sizeBytes, pool.extentSize)
		if err != nil {
			return 0, err
		}
		if want < o.size {
			return 0, errs.New(backends.ErrShrink, nil, "%d bytes requested, the source has %d", want, o.size)
		}
		if avail := b.thinAvailable(lvs, pool) - reserved; o.size > avail {
			return 0, errs.New(backends.ErrNoSpace, nil, "%d bytes requested, %d available in thin pool %s under overcommit ratio %g", o.size, avail, b.store, b.ratio)
		}
		return o.size, nil
	})
	if err == admit.ErrMade {
		// A retried call: the volume is there, perhaps not yet grown.
		if err := b.owned(id, retried); err != nil {
			return nil, err
		}
		return b.volume(id, retried), b.dropCopiedTags(ctx, retried, TagPrefix+id)
	}
	if err != nil {
		return nil, err
	}
	err = admit.ErrPanicked
	defer func() { res.End(err, b.last.take) }()
	_, err = b.lvm(ctx, "lvcreate", "--yes", "--snapshot", "--setactivationskip", "n", "--activate", "y", "--name", name,
		"--addtag", TagPrefix+id, b.vg+"/"+o.name)
	if err != nil && !errs.StderrContains(err, "already exists in volume group") {
		return nil, classify(err)
	}
	l, lerr := b.lvByName(ctx, name, lvFields)
	if lerr != nil {
		return nil, lerr
	}
	if err := b.owned(id, l); err != nil {
		return nil, err
	}
	if err := b.dropCopiedTags(ctx, l, TagPrefix+id); err != nil {
		return nil, err
	}
	return b.volume(id, l), nil
}

// find returns the LV named name, or nil.
func find(lvs []lv, name string) *lv {
	for i := range lvs {
		if lvs[i].name == name {
			return &lvs[i]
		}
	}
	return nil
}

// validateIDs validates volume and snapshot IDs, which have one form.
func validateIDs(ids ...string) error {
	for _, id := range ids {
		if err := backends.ValidateVolumeID(id); err != nil {
			return err
		}
	}
	return nil
}
