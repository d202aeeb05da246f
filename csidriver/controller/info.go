package controller

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// ControllerGetCapabilities lists what this service does.
func (s *Service) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// ValidateVolumeCapabilities confirms the capabilities pillar-csi serves
// for an existing volume.
func (s *Service) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	case len(req.GetVolumeCapabilities()) == 0:
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	v, err := s.getVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, errorf(codes.NotFound, id, "no such volume")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities(), v.Spec.MultiNodeBlockWriters); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}

// GetCapacity reports the space the agent has for new volumes in the store
// the parameters name (thin-aware: the agent applies the overcommit rule).
func (s *Service) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	// Capacity does not depend on the class's consent to several writers.
	if err := checkCapabilities(req.GetVolumeCapabilities(), true); err != nil && len(req.GetVolumeCapabilities()) > 0 {
		return &csi.GetCapacityResponse{}, nil
	}
	name := req.GetParameters()[v1alpha1.StorageClassParamStore]
	if name == "" {
		// No class named: the space of every store.
		var l v1alpha1.PillarStoreList
		if err := s.cfg.Client.List(ctx, &l); err != nil {
			return nil, status.Errorf(codes.Unavailable, "listing PillarStores: %v", err)
		}
		var sum int64
		for _, st := range l.Items {
			if st.Status.Capacity != nil {
				sum += st.Status.Capacity.AvailableBytes
			}
		}
		return &csi.GetCapacityResponse{AvailableCapacity: sum}, nil
	}
	_, store, conn, err := s.storeNamed(ctx, v1alpha1.ObjectName(name))
	if err != nil {
		var se interface{ GRPCStatus() *status.Status }
		if errors.As(err, &se) && se.GRPCStatus().Code() == codes.FailedPrecondition {
			return &csi.GetCapacityResponse{}, nil
		}
		return nil, err
	}
	resp, err := conn.Agent.GetCapacity(ctx, &agentv1.GetCapacityRequest{Store: store})
	if err != nil {
		return nil, mapAgentError(name, "GetCapacity", err)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: resp.GetAvailableBytes()}, nil
}
