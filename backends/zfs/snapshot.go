package zfs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/internal/admit"
	"github.com/pillar-csi/pillar-csi/backends/internal/errs"
)

// SnapshotProperty is the ZFS user property holding the ID of the
// snapshot that owns a ZFS snapshot, POOL/PARENT/SOURCE@ID. It marks a
// snapshot only when set on the snapshot itself, never inherited.
const SnapshotProperty = "io.pillar-csi:snapshot-id"

// CloneProperty marks a snapshot the backend took only to clone a volume
// (CreateFromVolume): it holds the new volume's ID. Such a snapshot is
// never listed, and is destroyed with the clone, or as soon as it has
// none.
const CloneProperty = "io.pillar-csi:clone-for"

// cloneSnapshotPrefix starts the name of a CreateFromVolume snapshot,
// SOURCE@pillar-clone-ID; snapshot IDs with it are refused.
const cloneSnapshotPrefix = "pillar-clone-"

// deletedOwner is what a deleted zvol's OwnerProperty holds while
// snapshots or clones of ours still need it (destroy.lua).
func deletedOwner(id string) string { return "deleted:" + id }

var _ backends.Snapshotter = (*Backend)(nil)

// CanSnapshot implements backends.Snapshotter: every ZFS store can.
func (b *Backend) CanSnapshot() error { return nil }

// snapshotProps are the columns of every zfs list of snapshots, in order.
var snapshotProps = "name,volsize,creation,defer_destroy," + SnapshotProperty

// zsnap is one row of a zfs list of snapshotProps.
type zsnap struct {
	name     string
	volSize  int64
	created  time.Time
	deferred bool   // marked for deferred destruction: deleted
	owner    string // "-" when unset
}

func parseSnapshots(out []byte) ([]zsnap, error) {
	rows, err := parseRows(out, 5)
	if err != nil {
		return nil, err
	}
	ss := make([]zsnap, 0, len(rows))
	for _, r := range rows {
		n, err := ints([]string{r[1], r[2]})
		if err != nil {
			return nil, err
		}
		ss = append(ss, zsnap{name: r[0], volSize: n[0], created: time.Unix(n[1], 0).UTC(), deferred: r[3] == "on", owner: r[4]})
	}
	return ss, nil
}

// snapshotName validates the IDs and returns the ZFS snapshot's name. The
// names of CreateFromVolume's snapshots are reserved.
func (b *Backend) snapshotName(id, sourceID string) (string, error) {
	if err := backends.ValidateVolumeID(id); err != nil {
		return "", err
	}
	if strings.HasPrefix(id, cloneSnapshotPrefix) {
		return "", errs.New(backends.ErrInvalidArgument, nil, "snapshot ID %q: IDs starting with %q are reserved", id, cloneSnapshotPrefix)
	}
	return b.snapshotPath(id, sourceID)
}

// snapshotPath returns SOURCE@NAME for the zvol of sourceID.
func (b *Backend) snapshotPath(snapName, sourceID string) (string, error) {
	src, err := b.checkID(sourceID)
	if err != nil {
		return "", err
	}
	name := src + "@" + snapName
	if len(name) > maxDatasetName {
		return "", errs.New(backends.ErrInvalidArgument, nil, "snapshot name %s is %d bytes, ZFS allows %d", name, len(name), maxDatasetName)
	}
	return name, nil
}

func (b *Backend) snapshot(s *zsnap, id, sourceID string) *backends.Snapshot {
	return &backends.Snapshot{ID: id, SourceID: sourceID, Name: s.name, SizeBytes: s.volSize, CreationTime: s.created}
}

// CreateSnapshot implements backends.Snapshotter: zfs snapshot, with
// SnapshotProperty set by the same command.
func (b *Backend) CreateSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	s, err := b.createSnapshot(ctx, id, sourceID)
	return s, errs.Wrap("create snapshot", b.parent, id, err)
}

func (b *Backend) createSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	name, err := b.snapshotName(id, sourceID)
	if err != nil {
		return nil, err
	}
	if _, err := b.get(ctx, sourceID); err != nil {
		return nil, err
	}
	_, err = b.zfs(ctx, "snapshot", "-o", SnapshotProperty+"="+id, name)
	if err != nil && !errs.StderrContains(err, "dataset already exists") {
		return nil, classify(err)
	}
	s, err := b.getSnapshot(ctx, id, sourceID)
	if backends.IsNotFound(err) {
		// Deleted, and kept for the clones made from it.
		return nil, errs.New(backends.ErrConflict, nil, "%s exists: %v", name, err)
	}
	return s, err
}

// DeleteSnapshot implements backends.Snapshotter: destroy.lua in mode
// "snapshot" checks the owner and destroys the snapshot in one sync task,
// deferred while clones need it, and reaps a deleted source that needed
// only it.
func (b *Backend) DeleteSnapshot(ctx context.Context, id, sourceID string) error {
	return errs.Wrap("delete snapshot", b.parent, id, b.deleteSnapshot(ctx, id, sourceID))
}

func (b *Backend) deleteSnapshot(ctx context.Context, id, sourceID string) error {
	name, err := b.snapshotName(id, sourceID)
	if err != nil {
		return err
	}
	v, err := b.program(ctx, "snapshot", name, SnapshotProperty, id)
	if err != nil {
		return err
	}
	return v.err("snapshot", name, id, SnapshotProperty)
}

// GetSnapshot implements backends.Snapshotter.
func (b *Backend) GetSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	s, err := b.getSnapshot(ctx, id, sourceID)
	return s, errs.Wrap("get snapshot", b.parent, id, err)
}

func (b *Backend) getSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	name, err := b.snapshotName(id, sourceID)
	if err != nil {
		return nil, err
	}
	out, err := b.zfs(ctx, "list", "-Hp", "-t", "snapshot", "-o", snapshotProps, name)
	switch {
	case errs.StderrContains(err, "dataset does not exist"):
		return nil, b.notFound(ctx, name)
	case err != nil:
		return nil, classify(err)
	}
	ss, err := parseSnapshots(out)
	if err != nil {
		return nil, err
	}
	if len(ss) != 1 || ss[0].name != name {
		return nil, fmt.Errorf("zfs list %s: unexpected output %q", name, out)
	}
	switch {
	case ss[0].owner != id:
		return nil, errs.New(backends.ErrConflict, nil, "%s exists and is not owned by snapshot %s (%s=%s)", name, id, SnapshotProperty, ss[0].owner)
	case ss[0].deferred:
		return nil, errs.New(backends.ErrNotFound, nil, "%s was deleted; it stays until the clones made from it are gone", name)
	}
	return b.snapshot(&ss[0], id, sourceID), nil
}

// ListSnapshots implements backends.Snapshotter.
func (b *Backend) ListSnapshots(ctx context.Context) ([]backends.Snapshot, error) {
	ss, err := b.listSnapshots(ctx)
	return ss, errs.Wrap("list snapshots", b.parent, "", err)
}

func (b *Backend) listSnapshots(ctx context.Context) ([]backends.Snapshot, error) {
	out, none, err := b.listParent(ctx, "-Hp", "-t", "snapshot", "-r", "-o", snapshotProps)
	if err != nil {
		return nil, err
	}
	if none {
		return []backends.Snapshot{}, nil
	}
	zs, err := parseSnapshots(out)
	if err != nil {
		return nil, err
	}
	ss := []backends.Snapshot{}
	for i := range zs {
		// Owned: the property holds a snapshot ID, the snapshot is named
		// after it, and it is of a zvol of the store.
		src, id, ok := strings.Cut(strings.TrimPrefix(zs[i].name, b.parent+"/"), "@")
		if !ok || zs[i].deferred || zs[i].owner != id || strings.Contains(src, "/") || strings.HasPrefix(id, cloneSnapshotPrefix) {
			continue
		}
		if backends.ValidateVolumeID(id) == nil && backends.ValidateVolumeID(src) == nil && zs[i].name == b.dataset(src)+"@"+id {
			ss = append(ss, *b.snapshot(&zs[i], id, src))
		}
	}
	slices.SortFunc(ss, func(a, b backends.Snapshot) int {
		return strings.Compare(a.SourceID+"\x00"+a.ID, b.SourceID+"\x00"+b.ID)
	})
	return ss, nil
}

// CreateFromSnapshot implements backends.Snapshotter: a linked clone (zfs
// clone), which shares the snapshot's blocks and takes space only as it
// diverges. While it exists, its snapshot and the snapshot's volume stay
// on the pool, hidden once deleted (destroy.lua).
func (b *Backend) CreateFromSnapshot(ctx context.Context, id, snapshotID, sourceID string, sizeBytes int64) (*backends.Volume, error) {
	v, err := b.createFromSnapshot(ctx, id, snapshotID, sourceID, sizeBytes)
	return v, errs.Wrap("create from snapshot", b.parent, id, err)
}

func (b *Backend) createFromSnapshot(ctx context.Context, id, snapshotID, sourceID string, sizeBytes int64) (*backends.Volume, error) {
	if _, err := b.checkID(id); err != nil {
		return nil, err
	}
	if err := backends.ValidateSize(sizeBytes); err != nil {
		return nil, err
	}
	snap, err := b.snapshotName(snapshotID, sourceID)
	if err != nil {
		return nil, err
	}
	// A retried call finds its volume, which may be cut short before its
	// growth.
	if v, err := b.retried(ctx, id, snap, sizeBytes); v != nil || err != nil {
		return v, err
	}
	s, err := b.getSnapshot(ctx, snapshotID, sourceID)
	if err != nil {
		return nil, err
	}
	return b.clone(ctx, id, s.Name, s.SizeBytes, sizeBytes)
}

// retried returns the volume id of a call made before (nil, nil when there
// is none), grown to sizeBytes: it must be a clone of snap, and anything
// else of that name is ErrConflict.
func (b *Backend) retried(ctx context.Context, id, snap string, sizeBytes int64) (*backends.Volume, error) {
	z, err := b.get(ctx, id)
	switch {
	case backends.IsNotFound(err):
		// Missing, or deleted and kept: clone finds out which.
		return nil, nil
	case err != nil:
		return nil, err
	}
	out, err := b.zfs(ctx, "get", "-Hp", "-o", "value", "origin", z.name)
	if err != nil {
		return nil, classify(err)
	}
	if origin := strings.TrimSpace(string(out)); origin != snap {
		return nil, errs.New(backends.ErrConflict, nil, "%s exists as a clone of %q, not of %s", z.name, origin, snap)
	}
	return b.grown(ctx, id, z, sizeBytes)
}

// CreateFromVolume implements backends.Snapshotter: a snapshot of the
// source taken for the clone alone (CloneProperty), a linked clone of it,
// and the snapshot marked for deferred destruction, so that ZFS destroys
// it with the clone. The snapshot is never listed.
func (b *Backend) CreateFromVolume(ctx context.Context, id, sourceID string, sizeBytes int64) (*backends.Volume, error) {
	v, err := b.createFromVolume(ctx, id, sourceID, sizeBytes)
	return v, errs.Wrap("create from volume", b.parent, id, err)
}

func (b *Backend) createFromVolume(ctx context.Context, id, sourceID string, sizeBytes int64) (*backends.Volume, error) {
	if _, err := b.checkID(id); err != nil {
		return nil, err
	}
	if err := backends.ValidateSize(sizeBytes); err != nil {
		return nil, err
	}
	snap, err := b.snapshotPath(cloneSnapshotPrefix+id, sourceID)
	if err != nil {
		return nil, err
	}
	if v, err := b.retried(ctx, id, snap, sizeBytes); v != nil || err != nil {
		if err == nil {
			// Cut short before its snapshot was released.
			err = b.releaseCloneSnapshot(ctx, id, snap)
		}
		return v, err
	}
	src, err := b.get(ctx, sourceID)
	if err != nil {
		return nil, err
	}
	_, err = b.zfs(ctx, "snapshot", "-o", CloneProperty+"="+id, snap)
	if errs.StderrContains(err, "dataset already exists") {
		// Taken by a call cut short, or by someone else: ours only with
		// the property, set on it.
		out, gerr := b.zfs(ctx, "get", "-Hp", "-s", "local", "-o", "value", CloneProperty, snap)
		if gerr != nil {
			return nil, classify(gerr)
		}
		if got := strings.TrimSpace(string(out)); got != id {
			return nil, errs.New(backends.ErrConflict, nil, "%s exists and was not taken for volume %s (%s=%q)", snap, id, CloneProperty, got)
		}
		err = nil
	}
	if err != nil {
		return nil, classify(err)
	}
	v, err := b.clone(ctx, id, snap, src.volSize, sizeBytes)
	if err != nil {
		// Not needed without its clone.
		_ = b.releaseCloneSnapshot(ctx, id, snap)
		return nil, err
	}
	return v, b.releaseCloneSnapshot(ctx, id, snap)
}

// releaseCloneSnapshot hands the snapshot snap, taken for the clone id, to
// ZFS: destroy.lua destroys it now if the clone is not there, else marks
// it for deferred destruction, which ZFS carries out with the clone. It
// checks CloneProperty in the same sync task.
func (b *Backend) releaseCloneSnapshot(ctx context.Context, id, snap string) error {
	v, err := b.program(ctx, "snapshot", snap, CloneProperty, id)
	if err != nil {
		return err
	}
	return v.err("snapshot", snap, id, CloneProperty)
}

// clone makes zvol id a clone of the snapshot snap, whose size is
// snapSize, and grows it to sizeBytes when that is more. A sparse store
// admits the clone's full size as it does a create; a thick one gives it
// a refreservation of its size (refreservation=auto).
func (b *Backend) clone(ctx context.Context, id, snap string, snapSize, sizeBytes int64) (*backends.Volume, error) {
	name := b.dataset(id)
	want, err := backends.RoundUp(sizeBytes, b.volBlockSize)
	if err != nil {
		return nil, err
	}
	if want < snapSize {
		return nil, errs.New(backends.ErrShrink, nil, "%d bytes requested, %s has %d", want, snap, snapSize)
	}
	args := []string{"clone"}
	for i := 0; i+1 < len(b.createOpts); i += 2 {
		// volblocksize is the origin's and cannot be set on a clone.
		if !strings.HasPrefix(b.createOpts[i+1], "volblocksize=") {
			args = append(args, b.createOpts[i], b.createOpts[i+1])
		}
	}
	if !b.sparse {
		args = append(args, "-o", "refreservation=auto")
	}
	args = append(args, "-o", OwnerProperty+"="+id, snap, name)
	err = b.cloneAdmitted(ctx, snapSize, args)
	exists := errs.StderrContains(err, "dataset already exists")
	if err != nil && !exists {
		return nil, classify(err)
	}
	z, err := b.get(ctx, id)
	if exists && backends.IsNotFound(err) {
		// Deleted, and kept for the snapshots or clones that need it.
		return nil, errs.New(backends.ErrConflict, nil, "%s exists: %v", name, err)
	}
	if err != nil {
		return nil, err
	}
	return b.grown(ctx, id, z, sizeBytes)
}

// cloneAdmitted runs zfs args (a clone of size bytes), admitted against the
// sparse store's figure as a create is.
func (b *Backend) cloneAdmitted(ctx context.Context, size int64, args []string) error {
	if !b.sparse {
		_, err := b.zfs(ctx, args...)
		return err
	}
	res, err := b.admit.Reserve(func(reserved int64) (int64, error) {
		avail, err := b.available(ctx, size, reserved)
		if err == nil && size > avail {
			err = errs.New(backends.ErrNoSpace, nil, "%d bytes requested, %d available under overcommit ratio %g", size, avail, b.ratio)
		}
		return size, err
	})
	if err != nil {
		return err
	}
	err = admit.ErrPanicked
	defer func() { res.End(err, b.figure.take) }()
	_, err = b.zfs(ctx, args...)
	return err
}

// grown returns the zvol z of volume id grown to at least sizeBytes.
func (b *Backend) grown(ctx context.Context, id string, z *zvol, sizeBytes int64) (*backends.Volume, error) {
	if z.volSize >= sizeBytes {
		return z.volume(), nil
	}
	return b.expand(ctx, id, sizeBytes)
}
