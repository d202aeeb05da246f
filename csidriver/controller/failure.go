package controller

import (
	"context"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// The CSI calls that change a volume keep its record's
// status.lastFailure (recordOutcome): `kubectl get pvstate` then says
// what a stuck claim, pod or deletion waits for.

// CreateVolume: see createVolume.
func (s *Service) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	resp, err := s.createVolume(ctx, req)
	if req.GetName() != "" {
		s.recordOutcome(ctx, "CreateVolume", volumeIDFor(req.GetName()), err)
	}
	return resp, err
}

// DeleteVolume: see deleteVolume.
func (s *Service) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	resp, err := s.deleteVolume(ctx, req)
	s.recordOutcome(ctx, "DeleteVolume", req.GetVolumeId(), err)
	return resp, err
}

// ControllerPublishVolume: see controllerPublishVolume.
func (s *Service) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	resp, err := s.controllerPublishVolume(ctx, req)
	s.recordOutcome(ctx, "ControllerPublishVolume", req.GetVolumeId(), err)
	return resp, err
}

// ControllerUnpublishVolume: see controllerUnpublishVolume.
func (s *Service) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	resp, err := s.controllerUnpublishVolume(ctx, req)
	s.recordOutcome(ctx, "ControllerUnpublishVolume", req.GetVolumeId(), err)
	return resp, err
}

// ControllerExpandVolume: see controllerExpandVolume.
func (s *Service) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	resp, err := s.controllerExpandVolume(ctx, req)
	s.recordOutcome(ctx, "ControllerExpandVolume", req.GetVolumeId(), err)
	return resp, err
}

// CreateSnapshot: see createSnapshot.
func (s *Service) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	resp, err := s.createSnapshot(ctx, req)
	if req.GetName() != "" {
		s.recordSnapshotOutcome(ctx, "CreateSnapshot", snapshotIDFor(req.GetName()), err)
	}
	return resp, err
}

// DeleteSnapshot: see deleteSnapshot.
func (s *Service) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	resp, err := s.deleteSnapshot(ctx, req)
	s.recordSnapshotOutcome(ctx, "DeleteSnapshot", req.GetSnapshotId(), err)
	return resp, err
}

// failureWriteTimeout bounds the write of lastFailure; it runs after the
// call, also when the caller's deadline has passed (that is a failure
// worth recording too).
const failureWriteTimeout = 5 * time.Second

// maxFailureMessage is the longest message kept (the CRD's limit).
const maxFailureMessage = 1024

// recordOutcome writes a failed call into the record's lastFailure, and
// clears lastFailure once a call of the same operation succeeds (a
// DeleteVolume that succeeds clears any). A call refused because another
// one on the volume is running (ABORTED) is neither: the running one
// decides. A volume without a record has nothing to keep it in. The
// failure is a merge patch of the status alone, so it cannot undo what
// the call wrote; clearing reads the cache first, so a successful call
// writes nothing when there was no failure. Errors are logged, never
// returned: the record is for people.
func (s *Service) recordOutcome(ctx context.Context, op, id string, callErr error) {
	s.keepOutcome(ctx, op, "DeleteVolume", &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: id}},
		func(o client.Object) *v1alpha1.OperationFailure {
			return o.(*v1alpha1.PillarVolumeState).Status.LastFailure
		}, callErr)
}

// recordSnapshotOutcome is recordOutcome for a snapshot's record.
func (s *Service) recordSnapshotOutcome(ctx context.Context, op, id string, callErr error) {
	s.keepOutcome(ctx, op, "DeleteSnapshot", &v1alpha1.PillarSnapshotState{ObjectMeta: metav1.ObjectMeta{Name: id}},
		func(o client.Object) *v1alpha1.OperationFailure {
			return o.(*v1alpha1.PillarSnapshotState).Status.LastFailure
		}, callErr)
}

// keepOutcome writes callErr into the lastFailure of obj (a record, named
// only), or clears it once op succeeds; a success of clearsAll clears any
// failure. last reads lastFailure of a record read into obj.
func (s *Service) keepOutcome(ctx context.Context, op, clearsAll string, obj client.Object, last func(client.Object) *v1alpha1.OperationFailure, callErr error) {
	id := obj.GetName()
	if id == "" || status.Code(callErr) == codes.Aborted {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failureWriteTimeout)
	defer cancel()
	var lf *v1alpha1.OperationFailure
	if callErr == nil {
		if err := s.cfg.Client.Get(ctx, types.NamespacedName{Name: id}, obj); err != nil {
			if !apierrors.IsNotFound(err) {
				s.log.Debug("lastFailure not checked", "name", id, "error", err)
			}
			return
		}
		if f := last(obj); f == nil || (f.Operation != op && op != clearsAll) {
			return
		}
	} else {
		msg := status.Convert(callErr).Message()
		if len(msg) > maxFailureMessage {
			msg = msg[:maxFailureMessage-3]
			for !utf8.ValidString(msg) { // cut inside a character
				msg = msg[:len(msg)-1]
			}
			msg += "..."
		}
		lf = &v1alpha1.OperationFailure{Operation: op, Code: status.Code(callErr).String(), Message: msg, Time: metav1.Now()}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"lastFailure": lf}})
	if err != nil {
		s.log.Warn("lastFailure not written", "name", id, "error", err)
		return
	}
	if err := s.cfg.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn("lastFailure not written", "name", id, "operation", op, "error", err)
	}
}
