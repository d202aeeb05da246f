package fakeagent

import (
	"context"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/fencing"
)

// Snapshot is a snapshot of the model.
type Snapshot struct {
	Source string // the volume it was taken of
	Size   int64
}

// The snapshot calls follow pillar-agent's rules: a snapshot has its own
// lifecycle, marked under "snapshot/<ID>"; CreateSnapshot and a volume
// made from a snapshot or a volume are fenced by both tokens.

func snapshotKey(id string) string { return "snapshot/" + id }

// Snapshots returns a copy of the model's snapshots.
func (a *Agent) Snapshots() map[string]Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]Snapshot{}
	for k, v := range a.snapshots {
		out[k] = v
	}
	return out
}

// contentSource is the origin a CreateVolume names and the fence of its
// source; an empty origin for an empty volume.
func contentSource(cs *agentv1.ContentSource) (string, fence) {
	switch src := cs.GetSource().(type) {
	case *agentv1.ContentSource_Snapshot:
		id := src.Snapshot.GetSnapshotId()
		return "snapshot " + id, fence{snapshotKey(id), fencing.KindMutate, src.Snapshot.GetFencingToken()}
	case *agentv1.ContentSource_Volume:
		id := src.Volume.GetVolumeId()
		return "volume " + id, fence{id, fencing.KindMutate, src.Volume.GetFencingToken()}
	}
	return "", fence{}
}

// createFrom makes volume id from origin, of at least size and never
// smaller than the source; a.mu is held.
func (a *Agent) createFrom(id, store, origin string, size int64, out *int64) error {
	kind, src, _ := strings.Cut(origin, " ")
	var min int64
	if kind == "snapshot" {
		sn, ok := a.snapshots[src]
		if !ok {
			return status.Errorf(codes.NotFound, "snapshot %s does not exist", src)
		}
		min = sn.Size
	} else {
		v, ok := a.volumes[src]
		if !ok {
			return status.Errorf(codes.NotFound, "volume %s does not exist", src)
		}
		min = v.Size
	}
	if size < min {
		return status.Errorf(codes.OutOfRange, "volume %s: %d bytes, less than its source's %d", id, size, min)
	}
	if v, ok := a.volumes[id]; ok {
		if v.Origin != origin || v.Size < size {
			return status.Errorf(codes.AlreadyExists, "volume %s exists, made from %q with %d bytes", id, v.Origin, v.Size)
		}
		*out = v.Size
		return nil
	}
	a.volumes[id] = Volume{Store: store, Size: size, Origin: origin}
	*out = size
	return nil
}

func (s *service) CreateSnapshot(ctx context.Context, req *agentv1.CreateSnapshotRequest) (*agentv1.CreateSnapshotResponse, error) {
	a := s.a
	id, src := req.GetSnapshotId(), req.GetSourceVolumeId()
	var out Snapshot
	err := a.fencedAll(ctx, "CreateSnapshot", []fence{
		{src, fencing.KindMutate, req.GetSourceFencingToken()},
		{snapshotKey(id), fencing.KindMutate, req.GetFencingToken()},
	}, func() error {
		if sn, ok := a.snapshots[id]; ok {
			if sn.Source != src {
				return status.Errorf(codes.AlreadyExists, "snapshot %s is of volume %s", id, sn.Source)
			}
			out = sn
			return nil
		}
		v, ok := a.volumes[src]
		if !ok {
			return status.Errorf(codes.NotFound, "volume %s does not exist", src)
		}
		out = Snapshot{Source: src, Size: v.Size}
		a.snapshots[id] = out
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.CreateSnapshotResponse{Snapshot: &agentv1.Snapshot{SnapshotId: id, SourceVolumeId: src, SizeBytes: out.Size, CreationTimeUnix: 1700000000}}, nil
}

func (s *service) DeleteSnapshot(ctx context.Context, req *agentv1.DeleteSnapshotRequest) (*agentv1.DeleteSnapshotResponse, error) {
	a := s.a
	id := req.GetSnapshotId()
	err := a.fenced(ctx, "DeleteSnapshot", snapshotKey(id), fencing.KindEnd, req.GetFencingToken(), func() error {
		if sn, ok := a.snapshots[id]; ok && sn.Source == req.GetSourceVolumeId() {
			delete(a.snapshots, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.DeleteSnapshotResponse{}, nil
}

func (s *service) ListSnapshots(ctx context.Context, req *agentv1.ListSnapshotsRequest) (*agentv1.ListSnapshotsResponse, error) {
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls["ListSnapshots"]++
	resp := &agentv1.ListSnapshotsResponse{}
	for _, id := range slices.Sorted(maps.Keys(a.snapshots)) {
		sn := a.snapshots[id]
		resp.Snapshots = append(resp.Snapshots, &agentv1.Snapshot{SnapshotId: id, SourceVolumeId: sn.Source, SizeBytes: sn.Size, CreationTimeUnix: 1700000000})
	}
	return resp, nil
}
