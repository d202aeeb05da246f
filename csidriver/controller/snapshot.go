package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarsnapshotstates,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarsnapshotstates/status,verbs=get;update;patch

// SnapshotFinalizer keeps a PillarSnapshotState until the agent accepted
// the End of its lifecycle (DeleteSnapshot).
const SnapshotFinalizer = "pillar-csi.io/snapshot"

// Keys the external-snapshotter adds to CreateSnapshot's parameters with
// --extra-create-metadata.
const (
	paramSnapshotName        = "csi.storage.k8s.io/volumesnapshot/name"
	paramSnapshotNamespace   = "csi.storage.k8s.io/volumesnapshot/namespace"
	paramSnapshotContentName = "csi.storage.k8s.io/volumesnapshotcontent/name"
)

// snapshotGeneration is the generation of every snapshot token. A
// snapshot is created and deleted, nothing else: what fences a stale call
// is the lifecycle (the record's UID), which DeleteSnapshot ends.
const snapshotGeneration = 1

func snapshotToken(sn *v1alpha1.PillarSnapshotState) *agentv1.FencingToken {
	return &agentv1.FencingToken{LifecycleUid: string(sn.UID), PublicationGeneration: snapshotGeneration}
}

// snapshotIDFor maps a CreateSnapshot name to the snapshot ID: the name
// itself when it is a valid ID short enough for the agent's fencing key
// (the external-snapshotter's snapshot-<uid> names are), else a digest of
// it, so the same name always maps to the same ID.
func snapshotIDFor(name string) string {
	if export.ValidateVolumeID(name) == nil && len(name) <= agentv1.MaxSnapshotIDLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "snapshot-" + hex.EncodeToString(sum[:20])
}

// snapshotLock is the key of a snapshot in the service's locks, apart
// from the volumes' (no volume ID contains '/').
func snapshotLock(id string) string { return "snapshot/" + id }

// getSnapshot reads a PillarSnapshotState fresh; nil when there is none.
func (s *Service) getSnapshot(ctx context.Context, id string) (*v1alpha1.PillarSnapshotState, error) {
	var sn v1alpha1.PillarSnapshotState
	if err := s.cfg.Reader.Get(ctx, types.NamespacedName{Name: id}, &sn); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, status.Errorf(codes.Unavailable, "reading PillarSnapshotState %s: %v", id, err)
	}
	return &sn, nil
}

// retryingSnapshot is retrying for snapshot id.
func (s *Service) retryingSnapshot(ctx context.Context, id string, step func(sn *v1alpha1.PillarSnapshotState) error) error {
	for range maxRaces {
		sn, err := s.getSnapshot(ctx, id)
		if err != nil {
			return err
		}
		if err := step(sn); !errors.Is(err, errLostRace) {
			return err
		}
	}
	return snapErrorf(codes.Aborted, id, "lost %d races for the PillarSnapshotState in a row; retry", maxRaces)
}

// snapErrorf is a status error with the snapshot named.
func snapErrorf(c codes.Code, id, format string, args ...any) error {
	return status.Errorf(c, "snapshot %s: %s", id, fmt.Sprintf(format, args...))
}

// createSnapshot writes the snapshot's record first, then has the agent
// take it, and records what the agent confirmed: a retry after a crash at
// any point resumes from the record. Idempotent by name: the same name and
// source is the same snapshot; another source is ALREADY_EXISTS.
func (s *Service) createSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, src := req.GetName(), req.GetSourceVolumeId()
	switch {
	case name == "":
		return nil, status.Error(codes.InvalidArgument, "name is required")
	case src == "":
		return nil, status.Errorf(codes.InvalidArgument, "snapshot %q: source volume ID is required", name)
	}
	id := snapshotIDFor(name)
	unlock, err := s.lockKey(snapshotLock(id), "snapshot "+id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var done *v1alpha1.PillarSnapshotState
	err = s.retryingSnapshot(ctx, id, func(sn *v1alpha1.PillarSnapshotState) error {
		switch {
		case sn == nil:
			v, err := s.liveVolume(ctx, src, "source volume")
			if err != nil {
				return err
			}
			if err := s.snapshotsIn(ctx, codes.FailedPrecondition, "snapshot "+id, string(v.Spec.StoreName)); err != nil {
				return err
			}
			// Nothing is recorded for an agent that cannot take it: the
			// record could not be deleted through it either.
			_, _, conn, err := s.storeNamed(ctx, v.Spec.StoreName)
			if err != nil {
				return err
			}
			if err := canSnapshot(ctx, conn.Agent, "snapshot", id); err != nil {
				return err
			}
			if sn, err = s.recordSnapshot(ctx, id, v, req.GetParameters()); err != nil {
				return err
			}
		case sn.Spec.SourceVolumeID != src:
			return snapErrorf(codes.AlreadyExists, id, "the name %q is taken by a snapshot of volume %s, not %s", name, sn.Spec.SourceVolumeID, src)
		case !sn.DeletionTimestamp.IsZero():
			// An interrupted DeleteSnapshot or rollback: finish it, then
			// let the CO retry into a new snapshot.
			if err := s.teardownSnapshot(ctx, sn); err != nil {
				return err
			}
			return snapErrorf(codes.Aborted, id, "an earlier snapshot of this name was being deleted; it is gone now: retry")
		case sn.Status.ReadyToUse:
			done = sn
			return nil
		}
		var err error
		done, err = s.takeSnapshot(ctx, sn)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(done)}, nil
}

func csiSnapshot(sn *v1alpha1.PillarSnapshotState) *csi.Snapshot {
	out := &csi.Snapshot{SnapshotId: sn.Name, SourceVolumeId: sn.Spec.SourceVolumeID, SizeBytes: sn.Status.SizeBytes, ReadyToUse: sn.Status.ReadyToUse}
	if t := sn.Status.CreationTime; t != nil {
		out.CreationTime = timestamppb.New(t.Time)
	} else {
		out.CreationTime = timestamppb.New(sn.CreationTimestamp.Time)
	}
	return out
}

// liveVolume reads volume id, which must exist and not be being deleted:
// NOT_FOUND otherwise.
func (s *Service) liveVolume(ctx context.Context, id, what string) (*v1alpha1.PillarVolumeState, error) {
	v, err := s.getVolume(ctx, id)
	switch {
	case err != nil:
		return nil, err
	case v == nil:
		return nil, status.Errorf(codes.NotFound, "%s %s does not exist", what, id)
	case !v.DeletionTimestamp.IsZero():
		return nil, status.Errorf(codes.NotFound, "%s %s is being deleted", what, id)
	case !v.Status.BackendCreated:
		return nil, status.Errorf(codes.Unavailable, "%s %s is still being created: retry", what, id)
	}
	return v, nil
}

// recordSnapshot creates the PillarSnapshotState of a new snapshot of v,
// in v's store.
func (s *Service) recordSnapshot(ctx context.Context, id string, v *v1alpha1.PillarVolumeState, params map[string]string) (*v1alpha1.PillarSnapshotState, error) {
	sn := &v1alpha1.PillarSnapshotState{
		ObjectMeta: metav1.ObjectMeta{Name: id, Finalizers: []string{SnapshotFinalizer}, Annotations: map[string]string{}},
		Spec:       v1alpha1.PillarSnapshotStateSpec{SnapshotID: id, SourceVolumeID: v.Name, StoreName: v.Spec.StoreName, StoreUID: v.Spec.StoreUID},
	}
	for param, ann := range map[string]string{paramSnapshotName: v1alpha1.AnnotationVolumeSnapshotName,
		paramSnapshotNamespace: v1alpha1.AnnotationVolumeSnapshotNamespace, paramSnapshotContentName: v1alpha1.AnnotationVolumeSnapshotContentName} {
		if n := params[param]; n != "" {
			sn.Annotations[ann] = n
		}
	}
	if err := s.cfg.Client.Create(ctx, sn); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, errLostRace
		}
		return nil, snapErrorf(codes.Unavailable, id, "writing the PillarSnapshotState: %v", err)
	}
	s.log.Info("snapshot recorded", "snapshot_id", id, "source_volume_id", v.Name, "store", v.Spec.StoreName)
	return sn, nil
}

// snapshotStore is the snapshot's store, the store the agent is told
// about and the agent's connection, refusing a store that is not the one
// the snapshot was taken in.
func (s *Service) snapshotStore(ctx context.Context, sn *v1alpha1.PillarSnapshotState) (*agentv1.Store, agentv1.AgentServiceClient, error) {
	st, proto, conn, err := s.storeNamed(ctx, sn.Spec.StoreName)
	if err != nil {
		return nil, nil, err
	}
	if err := storeIs("snapshot", sn.Name, sn.Spec.StoreUID, st); err != nil {
		return nil, nil, err
	}
	return proto, conn.Agent, nil
}

// takeSnapshot has the agent take the recorded snapshot, under its own
// token and its source's, and records what the agent reports.
func (s *Service) takeSnapshot(ctx context.Context, sn *v1alpha1.PillarSnapshotState) (*v1alpha1.PillarSnapshotState, error) {
	v, err := s.liveVolume(ctx, sn.Spec.SourceVolumeID, "source volume")
	if status.Code(err) == codes.NotFound {
		// The source went before the snapshot was taken: nothing can be
		// taken now. Roll the record back; the CO's retry says NOT_FOUND.
		if rerr := s.rollBackSnapshot(ctx, sn); rerr != nil {
			return nil, rerr
		}
		return nil, snapErrorf(codes.NotFound, sn.Name, "%v; the snapshot was rolled back", status.Convert(err).Message())
	}
	if err != nil {
		return nil, err
	}
	store, agent, err := s.snapshotStore(ctx, sn)
	if err != nil {
		return nil, err
	}
	resp, err := agent.CreateSnapshot(ctx, &agentv1.CreateSnapshotRequest{FencingToken: snapshotToken(sn), SourceFencingToken: tokenOf(v),
		SnapshotId: sn.Name, SourceVolumeId: v.Name, Store: store})
	if err != nil {
		return nil, s.snapshotAgentError(sn, "CreateSnapshot", err)
	}
	got := resp.GetSnapshot()
	t := metav1.Unix(got.GetCreationTimeUnix(), 0)
	sn.Status.ReadyToUse, sn.Status.SizeBytes, sn.Status.CreationTime = true, got.GetSizeBytes(), &t
	meta.SetStatusCondition(&sn.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonSnapshotTaken, Message: "the storage node took the snapshot", ObservedGeneration: sn.Generation})
	if err := s.cfg.Client.Status().Update(ctx, sn); err != nil {
		if apierrors.IsConflict(err) {
			return nil, errLostRace
		}
		return nil, snapErrorf(codes.Unavailable, sn.Name, "recording the snapshot: %v", err)
	}
	s.snapshotEvent(sn, corev1.EventTypeNormal, v1alpha1.ReasonSnapshotTaken, "snapshot of volume %s in store %s: %d bytes",
		v.Name, sn.Spec.StoreName, sn.Status.SizeBytes)
	return sn, nil
}

// rollBackSnapshot deletes a record whose snapshot can no longer be
// taken, through the same teardown as DeleteSnapshot.
func (s *Service) rollBackSnapshot(ctx context.Context, sn *v1alpha1.PillarSnapshotState) error {
	if err := s.cfg.Client.Delete(ctx, sn); client404(err) != nil {
		return snapErrorf(codes.Unavailable, sn.Name, "rolling back: %v", err)
	}
	return s.retryingSnapshot(ctx, sn.Name, func(sn *v1alpha1.PillarSnapshotState) error {
		if sn == nil {
			return nil
		}
		return s.teardownSnapshot(ctx, sn)
	})
}

// deleteSnapshot has the agent delete the snapshot, which ends its
// lifecycle in the agent's fencing mark; only then is the record let go.
// An unknown snapshot is success. The volumes restored from it and its
// source are not touched: the storage node keeps what they still need.
func (s *Service) deleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot ID is required")
	}
	unlock, err := s.lockKey(snapshotLock(id), "snapshot "+id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	err = s.retryingSnapshot(ctx, id, func(sn *v1alpha1.PillarSnapshotState) error {
		if sn == nil {
			return nil
		}
		if sn.DeletionTimestamp.IsZero() {
			// Mark the record deleted first: a concurrent CreateSnapshot
			// or restore of it then stops instead of using it.
			if err := s.cfg.Client.Delete(ctx, sn); client404(err) != nil {
				return snapErrorf(codes.Unavailable, id, "deleting the PillarSnapshotState: %v", err)
			}
			return errLostRace
		}
		return s.teardownSnapshot(ctx, sn)
	})
	if err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// teardownSnapshot ends the snapshot at the agent (also when the record
// never saw it confirmed: a CreateSnapshot may have reached the agent
// before a crash), then drops the finalizer.
func (s *Service) teardownSnapshot(ctx context.Context, sn *v1alpha1.PillarSnapshotState) error {
	store, agent, err := s.snapshotStore(ctx, sn)
	if err != nil {
		return err
	}
	_, err = agent.DeleteSnapshot(ctx, &agentv1.DeleteSnapshotRequest{FencingToken: snapshotToken(sn), SnapshotId: sn.Name,
		SourceVolumeId: sn.Spec.SourceVolumeID, Store: store})
	switch {
	case status.Code(err) == codes.Unimplemented && canSnapshot(ctx, agent, "snapshot", sn.Name) != nil:
		// An agent without snapshots (downgraded) never took this one.
		s.log.Warn("the agent takes no snapshots; the record is released", "snapshot_id", sn.Name)
	case err != nil:
		return s.snapshotAgentError(sn, "DeleteSnapshot", err)
	}
	s.storeChanged(sn.Spec.StoreName)
	sn.Finalizers = slices.DeleteFunc(sn.Finalizers, func(f string) bool { return f == SnapshotFinalizer })
	if err := client404(s.cfg.Client.Update(ctx, sn)); err != nil {
		if apierrors.IsConflict(err) {
			return errLostRace
		}
		return snapErrorf(codes.Unavailable, sn.Name, "releasing the PillarSnapshotState: %v", err)
	}
	s.log.Info("snapshot deleted", "snapshot_id", sn.Name, "source_volume_id", sn.Spec.SourceVolumeID, "store", sn.Spec.StoreName)
	return nil
}

// snapshotAgentError is agentError for a snapshot's call.
func (s *Service) snapshotAgentError(sn *v1alpha1.PillarSnapshotState, what string, err error) error {
	mapped := mapAgentErrorFor("snapshot", sn.Name, what, err)
	if rej, ok := agentv1.FencingRejectionOf(err); ok {
		s.cfg.Metrics.fencingRejected(rej.GetReason())
		s.log.Warn("refused by the agent's fencing", "snapshot_id", sn.Name, "call", what, "reason", rej.GetReason().String(),
			"refused_for", rej.GetVolumeId(), "presented_uid", rej.GetPresented().GetLifecycleUid(),
			"presented_generation", rej.GetPresented().GetPublicationGeneration(), "record_uid", string(sn.UID))
		s.snapshotEvent(sn, corev1.EventTypeWarning, v1alpha1.ReasonFencingRefused, "%s", status.Convert(mapped).Message())
	}
	return mapped
}

// snapshotEvent records an event on the snapshot's record.
func (s *Service) snapshotEvent(sn *v1alpha1.PillarSnapshotState, typ, reason, format string, args ...any) {
	if s.cfg.Recorder != nil {
		s.cfg.Recorder.Eventf(sn, nil, typ, reason, "CSI", format, args...)
	}
}

// ListSnapshots pages through the PillarSnapshotStates, as ListVolumes
// does the volumes, or reports the one snapshot or the snapshots of the
// one source volume asked for. Snapshots being deleted are not listed.
func (s *Service) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "max_entries %d is negative", req.GetMaxEntries())
	}
	if id := req.GetSnapshotId(); id != "" {
		sn, err := s.getSnapshot(ctx, id)
		if err != nil {
			return nil, err
		}
		resp := &csi.ListSnapshotsResponse{}
		if sn != nil && sn.DeletionTimestamp.IsZero() && (req.GetSourceVolumeId() == "" || req.GetSourceVolumeId() == sn.Spec.SourceVolumeID) {
			resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(sn)})
		}
		return resp, nil
	}
	var l v1alpha1.PillarSnapshotStateList
	if err := s.listPage(ctx, "PillarSnapshotStates", &l, req.GetMaxEntries(), req.GetStartingToken()); err != nil {
		return nil, err
	}
	resp := &csi.ListSnapshotsResponse{NextToken: l.Continue}
	for i := range l.Items {
		sn := &l.Items[i]
		if sn.DeletionTimestamp.IsZero() && (req.GetSourceVolumeId() == "" || req.GetSourceVolumeId() == sn.Spec.SourceVolumeID) {
			resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(sn)})
		}
	}
	return resp, nil
}
