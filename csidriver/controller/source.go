package controller

import (
	"context"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// dataSourceOf is the record's form of CreateVolume's content source; nil
// for a volume made empty.
func dataSourceOf(name string, cs *csi.VolumeContentSource) (*v1alpha1.VolumeDataSource, error) {
	switch t := cs.GetType().(type) {
	case *csi.VolumeContentSource_Snapshot:
		if id := t.Snapshot.GetSnapshotId(); id != "" {
			return &v1alpha1.VolumeDataSource{SnapshotID: id}, nil
		}
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: the content source names no snapshot ID", name)
	case *csi.VolumeContentSource_Volume:
		if id := t.Volume.GetVolumeId(); id != "" {
			return &v1alpha1.VolumeDataSource{VolumeID: id}, nil
		}
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: the content source names no volume ID", name)
	}
	if cs != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: the content source names neither a snapshot nor a volume", name)
	}
	return nil, nil
}

// csiSource is the CSI form of a record's data source.
func csiSource(ds *v1alpha1.VolumeDataSource) *csi.VolumeContentSource {
	switch {
	case ds == nil:
		return nil
	case ds.SnapshotID != "":
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: ds.SnapshotID}}}
	}
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: ds.VolumeID}}}
}

// describeSource names a data source for messages.
func describeSource(ds *v1alpha1.VolumeDataSource) string {
	switch {
	case ds == nil:
		return "nothing (an empty volume)"
	case ds.SnapshotID != "":
		return "snapshot " + ds.SnapshotID
	}
	return "volume " + ds.VolumeID
}

// sameSource refuses a repeated CreateVolume whose content source is not
// the one the volume was made from.
func sameSource(v *v1alpha1.PillarVolumeState, ds *v1alpha1.VolumeDataSource) error {
	got := v.Spec.DataSource
	if (got == nil) == (ds == nil) && (got == nil || *got == *ds) {
		return nil
	}
	return errorf(codes.AlreadyExists, v.Name, "exists, made from %s, not from %s", describeSource(got), describeSource(ds))
}

// snapshotsIn refuses a store that takes no snapshots (linear LVM) before
// anything is recorded for it; what happens to be unreadable is left to
// the agent, which refuses such a store as well.
func (s *Service) snapshotsIn(ctx context.Context, code codes.Code, what, storeName string) error {
	var st v1alpha1.PillarStore
	if err := s.cfg.Client.Get(ctx, types.NamespacedName{Name: storeName}, &st); err != nil {
		return nil
	}
	if st.Spec.Type == v1alpha1.BackendLVM && st.Spec.LVM != nil && st.Spec.LVM.ThinPool == "" {
		return status.Errorf(code, "%s: PillarStore %q is linear LVM: snapshots and clones need a ZFS store or an LVM thin store (spec.lvm.thinPool)",
			what, storeName)
	}
	return nil
}

// checkSource checks the source of a new volume id in storeName: it
// exists, is ready, lives in that store, and is no larger than the range
// allows. It returns the volume's size: the request's, or the source's
// when the request names no required size.
func (s *Service) checkSource(ctx context.Context, id string, ds *v1alpha1.VolumeDataSource, storeName string, r *csi.CapacityRange, size int64) (int64, error) {
	var store v1alpha1.ObjectName
	var bytes int64
	if ds.SnapshotID != "" {
		sn, err := s.getSnapshot(ctx, ds.SnapshotID)
		switch {
		case err != nil:
			return 0, err
		case sn == nil || !sn.DeletionTimestamp.IsZero():
			return 0, errorf(codes.NotFound, id, "snapshot %s does not exist", ds.SnapshotID)
		case !sn.Status.ReadyToUse:
			return 0, errorf(codes.Unavailable, id, "snapshot %s is not ready yet: retry", ds.SnapshotID)
		}
		store, bytes = sn.Spec.StoreName, sn.Status.SizeBytes
	} else {
		v, err := s.liveVolume(ctx, ds.VolumeID, "source volume")
		if err != nil {
			return 0, errorf(status.Code(err), id, "%s", status.Convert(err).Message())
		}
		store, bytes = v.Spec.StoreName, volumeBytes(v)
	}
	// CSI: a source the plugin cannot make a volume from is
	// INVALID_ARGUMENT.
	if err := s.snapshotsIn(ctx, codes.InvalidArgument, "volume "+id, string(store)); err != nil {
		return 0, err
	}
	if string(store) != storeName {
		return 0, errorf(codes.InvalidArgument, id, "%s is in store %q, and the StorageClass names store %q: a volume made from a snapshot or a volume "+
			"lives in its source's store; use a StorageClass of store %q", describeSource(ds), store, storeName, store)
	}
	if r.GetRequiredBytes() == 0 {
		size = bytes
	}
	if size < bytes || (r.GetLimitBytes() > 0 && bytes > r.GetLimitBytes()) {
		return 0, errorf(codes.OutOfRange, id, "%s holds %d bytes, outside the requested range %d..%d: a volume made from it is at least as large",
			describeSource(ds), bytes, r.GetRequiredBytes(), r.GetLimitBytes())
	}
	return size, nil
}

// canSnapshot refuses an agent that does not announce CAPABILITY_SNAPSHOTS
// (an older one, during a rolling upgrade): it would make an empty volume
// of a restore, and answers the snapshot calls UNIMPLEMENTED.
func canSnapshot(ctx context.Context, agent agentv1.AgentServiceClient, kind, id string) error {
	info, err := agent.GetAgentInfo(ctx, &agentv1.GetAgentInfoRequest{})
	if err != nil {
		return mapAgentErrorFor(kind, id, "GetAgentInfo", err)
	}
	if !slices.Contains(info.GetCapabilities(), agentv1.Capability_CAPABILITY_SNAPSHOTS) {
		return status.Errorf(codes.FailedPrecondition, "%s %s: pillar-agent %s on node %q takes no snapshots and makes no volume from a snapshot or another volume: upgrade it",
			kind, id, info.GetAgentVersion(), info.GetNodeName())
	}
	return nil
}

// contentSource is the agent's content source for v's record, with the
// source's token, once the agent is known to take one (an older agent
// would make an empty volume). A source gone before the volume was made
// from it rolls the volume back: NOT_FOUND.
func (s *Service) contentSource(ctx context.Context, v *v1alpha1.PillarVolumeState, agent agentv1.AgentServiceClient) (*agentv1.ContentSource, error) {
	if err := canSnapshot(ctx, agent, "volume", v.Name); err != nil {
		return nil, err
	}
	ds := v.Spec.DataSource
	gone := func(what string) error {
		if err := s.rollBack(ctx, v); err != nil {
			return err
		}
		return errorf(codes.NotFound, v.Name, "%s went before the volume was made from it; the volume was rolled back", what)
	}
	if ds.SnapshotID != "" {
		sn, err := s.getSnapshot(ctx, ds.SnapshotID)
		switch {
		case err != nil:
			return nil, err
		case sn == nil || !sn.DeletionTimestamp.IsZero():
			return nil, gone("snapshot " + ds.SnapshotID)
		}
		return &agentv1.ContentSource{Source: &agentv1.ContentSource_Snapshot{Snapshot: &agentv1.SnapshotSource{
			FencingToken: snapshotToken(sn), SnapshotId: sn.Name, SourceVolumeId: sn.Spec.SourceVolumeID}}}, nil
	}
	src, err := s.liveVolume(ctx, ds.VolumeID, "source volume")
	switch {
	case status.Code(err) == codes.NotFound:
		return nil, gone("volume " + ds.VolumeID)
	case err != nil:
		return nil, err
	}
	return &agentv1.ContentSource{Source: &agentv1.ContentSource_Volume{Volume: &agentv1.VolumeSource{FencingToken: tokenOf(src), VolumeId: src.Name}}}, nil
}
