package controller

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// ListVolumes pages through the PillarVolumeStates; the starting token is
// the API server's continue token, so a listing is one consistent
// snapshot. An expired or foreign token is ABORTED, as the CSI spec asks.
func (s *Service) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "max_entries %d is negative", req.GetMaxEntries())
	}
	var l v1alpha1.PillarVolumeStateList
	if err := s.listPage(ctx, "PillarVolumeStates", &l, req.GetMaxEntries(), req.GetStartingToken()); err != nil {
		return nil, err
	}
	resp := &csi.ListVolumesResponse{NextToken: l.Continue}
	for i := range l.Items {
		v := &l.Items[i]
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: &csi.Volume{VolumeId: v.Name, CapacityBytes: volumeBytes(v)},
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodesOf(v)},
		})
	}
	return resp, nil
}

// ControllerGetVolume reports one volume and the nodes it is published to
// as the record shows them. (CSI 1.13 has no volume condition here; the
// record's Ready and ExportSpecMissing conditions say how it is.)
func (s *Service) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	v, err := s.getVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, errorf(codes.NotFound, id, "no such volume")
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: &csi.Volume{VolumeId: v.Name, CapacityBytes: volumeBytes(v)},
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: nodesOf(v)},
	}, nil
}

func volumeBytes(v *v1alpha1.PillarVolumeState) int64 {
	if v.Status.CapacityBytes > 0 {
		return v.Status.CapacityBytes
	}
	return v.Spec.CapacityBytes
}

// listPage lists one page of records into l, from the API server: at most
// max (0: all), after the CSI starting token, which is the API server's
// continue token. An expired or foreign token is ABORTED, as the CSI spec
// asks.
func (s *Service) listPage(ctx context.Context, what string, l client.ObjectList, max int32, token string) error {
	opts := []client.ListOption{client.Continue(token)}
	if max > 0 {
		opts = append(opts, client.Limit(int64(max)))
	}
	if err := s.cfg.Reader.List(ctx, l, opts...); err != nil {
		if token != "" && (apierrors.IsBadRequest(err) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) {
			return status.Errorf(codes.Aborted, "starting token %q: %v", token, err)
		}
		return status.Errorf(codes.Unavailable, "listing %s: %v", what, err)
	}
	return nil
}
