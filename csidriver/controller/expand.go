package controller

import (
	"context"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// controllerExpandVolume records the new size, then has the agent grow the
// backend volume (nvmet re-reads the size, so connected initiators see
// it); a filesystem volume then needs NodeExpandVolume.
func (s *Service) controllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity range is required")
	}
	size, err := capacityFor(req.GetCapacityRange())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", id, err)
	}
	unlock, err := s.lock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var got int64
	err = s.retrying(ctx, id, func(v *v1alpha1.PillarVolumeState) error {
		if v == nil || !v.DeletionTimestamp.IsZero() {
			return errorf(codes.NotFound, id, "no such volume")
		}
		if !v.Status.BackendCreated {
			return errorf(codes.FailedPrecondition, id, "the volume is not provisioned yet")
		}
		if v.Status.CapacityBytes >= size && v.Spec.CapacityBytes >= size {
			got = v.Status.CapacityBytes
			return nil
		}
		if len(v.Spec.Publications) > 1 && v.Spec.Publications[0].AccessMode == v1alpha1.AccessReadWriteMany {
			// Writers on two nodes are a hand-over in progress (a live
			// migration): the volume grows once one node holds it, and
			// the resizer retries until then. Neither node's view of the
			// device changes under it meanwhile.
			return errorf(codes.FailedPrecondition, id, "the volume is published ReadWriteMany to %d nodes (%s): it is expanded when one node holds it (docs/rwx-block.md)",
				len(v.Spec.Publications), strings.Join(nodeNames(v.Spec.Publications), ", "))
		}
		v.Spec.CapacityBytes = max(v.Spec.CapacityBytes, size)
		tok, err := s.issue(ctx, v)
		if err != nil {
			return err
		}
		_, store, conn, err := s.storeOf(ctx, v)
		if err != nil {
			return err
		}
		resp, err := conn.Agent.ExpandVolume(ctx, &agentv1.ExpandVolumeRequest{FencingToken: tok, VolumeId: id, Store: store, CapacityBytes: v.Spec.CapacityBytes})
		if err != nil {
			return s.agentError(v, "ExpandVolume", err)
		}
		v.Status.CapacityBytes = resp.GetVolume().GetCapacityBytes()
		got = v.Status.CapacityBytes
		s.storeChanged(v.Spec.StoreName)
		return s.writeStatus(ctx, v, v1alpha1.ReasonExpanded, "expanded")
	})
	if err != nil {
		return nil, err
	}
	_, block := req.GetVolumeCapability().GetAccessType().(*csi.VolumeCapability_Block)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: got, NodeExpansionRequired: !block}, nil
}
