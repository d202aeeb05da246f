package server

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/fencing"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// snapshotKey is the fencing-store key and lock name of a snapshot's
// lifecycle (agentv1.SnapshotFencingKeyPrefix).
func snapshotKey(id string) string { return agentv1.SnapshotFencingKeyPrefix + id }

// snapshotsOf returns the snapshot methods of a store's backend: those of
// the limited backend the store cache hands out, each behind a slot.
func snapshotsOf(b backends.Backend) backends.Snapshotter {
	switch b := b.(type) {
	case *limited:
		return b.snapshotter()
	case backends.Snapshotter:
		return b
	}
	return unsupported{}
}

// snapshotExists is the check of fencing rule 19 for snapshot id of
// sourceID, asked only when the snapshot has no mark.
func snapshotExists(sn backends.Snapshotter, id, sourceID string) fencing.Exists {
	return func(ctx context.Context) (bool, error) {
		_, err := sn.GetSnapshot(ctx, id, sourceID)
		return owned(err)
	}
}

// validateSnapshotIDs checks a request's snapshot and source volume IDs.
func validateSnapshotIDs(op, id, sourceID string) error {
	if err := validateVolumeID(op+" snapshot_id", id); err != nil {
		return err
	}
	if len(id) > agentv1.MaxSnapshotIDLength {
		return status.Errorf(codes.InvalidArgument, "%s: snapshot_id %q: %d bytes, at most %d allowed", op, id, len(id), agentv1.MaxSnapshotIDLength)
	}
	return validateVolumeID(op+" source_volume_id", sourceID)
}

// snapshotCall validates the request of a call about one snapshot and
// returns its store's backend, the backend's snapshot methods and the
// call's logger. A store that takes no snapshots is refused here, before
// any fencing mark is written for the call.
func (s *Server) snapshotCall(ctx context.Context, op, id, sourceID string, st *agentv1.Store) (backends.Backend, backends.Snapshotter, *slog.Logger, error) {
	if err := validateSnapshotIDs(op, id, sourceID); err != nil {
		return nil, nil, nil, err
	}
	b, spec, err := s.backend(op, st)
	if err != nil {
		return nil, nil, nil, err
	}
	sn := snapshotsOf(b)
	if err := sn.CanSnapshot(); err != nil {
		return nil, nil, nil, toStatus(ctx, op, "", err)
	}
	return b, sn, s.log.With("snapshot_id", id, "source_volume_id", sourceID, "store", spec.String()), nil
}

// snapshotIDFree refuses a new snapshot whose ID the store already uses:
// for a snapshot of another volume, or for a volume. A snapshot ID names
// one snapshot in a store (its fencing mark, ListSnapshots' order and
// pages go by it), though ZFS would take SOURCE@ID under every source.
func snapshotIDFree(ctx context.Context, b backends.Backend, sn backends.Snapshotter, id, sourceID string) error {
	const op = "CreateSnapshot"
	switch _, err := sn.GetSnapshot(ctx, id, sourceID); {
	case err == nil:
		return nil // this snapshot: a retry
	case !backends.IsNotFound(err):
		return toStatus(ctx, op, sourceID, err)
	}
	switch _, err := b.Get(ctx, id); {
	case err == nil, backends.IsConflict(err):
		return status.Errorf(codes.AlreadyExists, "%s: snapshot ID %q is the name of a volume in the store; a snapshot ID must name nothing else", op, id)
	case !backends.IsNotFound(err):
		return toStatus(ctx, op, id, err)
	}
	all, err := sn.ListSnapshots(ctx)
	if err != nil {
		return toStatus(ctx, op, sourceID, err)
	}
	for _, other := range all {
		if other.ID == id && other.SourceID != sourceID {
			return status.Errorf(codes.AlreadyExists, "%s: snapshot ID %q is taken by a snapshot of volume %q", op, id, other.SourceID)
		}
	}
	return nil
}

// CreateSnapshot takes a snapshot of a volume, fenced by the source's
// token and by the snapshot's own, whose lifecycle it starts.
func (s *Server) CreateSnapshot(ctx context.Context, req *agentv1.CreateSnapshotRequest) (*agentv1.CreateSnapshotResponse, error) {
	const op = "CreateSnapshot"
	id, src := req.GetSnapshotId(), req.GetSourceVolumeId()
	b, sn, log, err := s.snapshotCall(ctx, op, id, src, req.GetStore())
	if err != nil {
		return nil, err
	}
	var snap *backends.Snapshot
	err = s.fencedAll(ctx, op, []fence{
		{key: src, kind: fencing.KindMutate, token: req.GetSourceFencingToken(), exists: s.exists(b, src)},
		{key: snapshotKey(id), kind: fencing.KindMutate, token: req.GetFencingToken(), exists: snapshotExists(sn, id, src)},
	}, func(ctx context.Context) error {
		if err := snapshotIDFree(ctx, b, sn, id, src); err != nil {
			return err
		}
		var err error
		if snap, err = sn.CreateSnapshot(ctx, id, src); err != nil {
			log.Error("create snapshot failed", "error", err)
			return toStatus(ctx, op, src, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	log.Info("snapshot created", "name", snap.Name, "bytes", snap.SizeBytes)
	return &agentv1.CreateSnapshotResponse{Snapshot: snapshotProto(snap)}, nil
}

func snapshotProto(s *backends.Snapshot) *agentv1.Snapshot {
	return &agentv1.Snapshot{SnapshotId: s.ID, SourceVolumeId: s.SourceID, SizeBytes: s.SizeBytes, CreationTimeUnix: s.CreationTime.Unix()}
}

// DeleteSnapshot deletes a snapshot and ends its lifecycle, the tombstone
// durable before anything is destroyed (as DeleteVolume).
func (s *Server) DeleteSnapshot(ctx context.Context, req *agentv1.DeleteSnapshotRequest) (*agentv1.DeleteSnapshotResponse, error) {
	const op = "DeleteSnapshot"
	id, src := req.GetSnapshotId(), req.GetSourceVolumeId()
	_, sn, log, err := s.snapshotCall(ctx, op, id, src, req.GetStore())
	if err != nil {
		return nil, err
	}
	err = s.fencedAll(ctx, op, []fence{
		{key: snapshotKey(id), kind: fencing.KindEnd, token: req.GetFencingToken(), exists: snapshotExists(sn, id, src)},
	}, func(ctx context.Context) error {
		err := sn.DeleteSnapshot(ctx, id, src)
		if backends.IsConflict(err) {
			// The name is held by something this snapshot ID does not
			// own: there is no snapshot of it to delete, and the
			// lifecycle ends all the same.
			log.Warn("the snapshot's name is taken by something it does not own; nothing deleted", "error", err)
			return nil
		}
		if err != nil {
			log.Error("delete snapshot failed", "error", err)
			return toStatus(ctx, op, src, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	log.Info("snapshot deleted")
	return &agentv1.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists the pillar-csi snapshots of one store, ordered by
// snapshot ID, which names one snapshot in a store (snapshotIDFree); a
// page token is the last snapshot ID of a page.
func (s *Server) ListSnapshots(ctx context.Context, req *agentv1.ListSnapshotsRequest) (*agentv1.ListSnapshotsResponse, error) {
	const op = "ListSnapshots"
	b, spec, err := s.backend(op, req.GetStore())
	if err != nil {
		return nil, err
	}
	sn := snapshotsOf(b)
	if err := sn.CanSnapshot(); err != nil {
		return nil, toStatus(ctx, op+" "+spec.String(), "", err)
	}
	ss, err := sn.ListSnapshots(ctx)
	if err != nil {
		return nil, toStatus(ctx, op+" "+spec.String(), "", err)
	}
	all := make([]*agentv1.Snapshot, 0, len(ss))
	for i := range ss {
		all = append(all, snapshotProto(&ss[i]))
	}
	slices.SortFunc(all, func(a, b *agentv1.Snapshot) int {
		if c := strings.Compare(a.SnapshotId, b.SnapshotId); c != 0 {
			return c
		}
		return strings.Compare(a.SourceVolumeId, b.SourceVolumeId)
	})
	snaps, next, err := page(op, all, (*agentv1.Snapshot).GetSnapshotId, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &agentv1.ListSnapshotsResponse{Snapshots: snaps, NextPageToken: next}, nil
}

// contentSource validates CreateVolume's content_source for volume id
// and returns the source's fence (the snapshot's or the source volume's
// token: both lifecycles are checked in one step with the new volume's)
// and the backend call that makes the volume from it.
func (s *Server) contentSource(ctx context.Context, b backends.Backend, id string, size int64, cs *agentv1.ContentSource) (fence, func(context.Context) (*backends.Volume, error), error) {
	const op = "CreateVolume"
	sn := snapshotsOf(b)
	if err := sn.CanSnapshot(); err != nil {
		// Before any mark is written: the new volume's comes first.
		return fence{}, nil, toStatus(ctx, op, id, err)
	}
	switch src := cs.GetSource().(type) {
	case *agentv1.ContentSource_Snapshot:
		sid, svol := src.Snapshot.GetSnapshotId(), src.Snapshot.GetSourceVolumeId()
		if err := validateSnapshotIDs(op+" content_source", sid, svol); err != nil {
			return fence{}, nil, err
		}
		f := fence{key: snapshotKey(sid), kind: fencing.KindMutate, token: src.Snapshot.GetFencingToken(), exists: snapshotExists(sn, sid, svol)}
		return f, func(ctx context.Context) (*backends.Volume, error) {
			return sn.CreateFromSnapshot(ctx, id, sid, svol, size)
		}, nil
	case *agentv1.ContentSource_Volume:
		svol := src.Volume.GetVolumeId()
		if err := validateVolumeID(op+" content_source volume_id", svol); err != nil {
			return fence{}, nil, err
		}
		if svol == id {
			return fence{}, nil, status.Errorf(codes.InvalidArgument, "%s volume %q: a volume cannot be cloned from itself", op, id)
		}
		f := fence{key: svol, kind: fencing.KindMutate, token: src.Volume.GetFencingToken(), exists: s.exists(b, svol)}
		return f, func(ctx context.Context) (*backends.Volume, error) {
			return sn.CreateFromVolume(ctx, id, svol, size)
		}, nil
	}
	return fence{}, nil, status.Errorf(codes.InvalidArgument, "%s volume %q: content_source names neither a snapshot nor a volume", op, id)
}
