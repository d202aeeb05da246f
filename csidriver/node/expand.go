package node

import (
	"context"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/stage"
)

// NodeExpandVolume makes the grown namespace visible and grows the
// filesystem to it. The target announces a size change with an
// asynchronous event; rescan_controller makes the initiator re-read the
// namespace even if that event was missed, and the new size is awaited
// (bounded) before resize2fs or xfs_growfs runs. Block volumes need no
// filesystem step.
func (s *Service) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	volumeID := req.GetVolumeId()
	if err := validVolumeID(volumeID); err != nil {
		return nil, err
	}
	if req.GetVolumePath() == "" {
		return nil, invalid("volume_path is missing")
	}
	unlock, log, err := s.begin(volumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// An unknown volume is NotFound before its path is judged.
	r, err := s.stagedRecord(volumeID, codes.NotFound)
	if err != nil {
		return nil, err
	}
	if err := s.validPath("volume_path", req.GetVolumePath()); err != nil {
		return nil, err
	}
	if req.GetStagingTargetPath() != "" {
		if err := s.validPath("staging_target_path", req.GetStagingTargetPath()); err != nil {
			return nil, err
		}
	}
	required := req.GetCapacityRange().GetRequiredBytes()
	if required < 0 {
		return nil, invalid("capacity_range.required_bytes %d is negative", required)
	}
	if err := s.nvme.Rescan(r.SubsystemNQN); err != nil {
		return nil, statusOf("rescan", err)
	}
	id, _ := export.For(volumeID)
	dev, ok, err := s.nvme.FindNamespace(id)
	if err != nil {
		return nil, statusOf("find namespace", err)
	}
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s: no block device with uuid %s", volumeID, id.UUID)
	}
	size, err := s.waitSize(ctx, dev, required)
	if err != nil {
		return nil, statusOf("wait for the new size", err)
	}
	log.Info("namespace size", "device", dev, "bytes", size)
	if r.AccessType == stage.Mount {
		if err := s.resize(ctx, r.FsType, s.nvme.DevicePath(dev), r.StagingPath); err != nil {
			return nil, statusOf("resize filesystem", err)
		}
		log.Info("filesystem grown", "fs_type", r.FsType)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// waitSize polls the device size until it reaches required (0: no
// expectation) or ResizeTimeout passes.
func (s *Service) waitSize(ctx context.Context, dev string, required int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ResizeTimeout)
	defer cancel()
	for {
		size, err := s.nvme.DeviceSize(dev)
		if err != nil {
			return 0, err
		}
		if size >= required {
			return size, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s is %d bytes, %d required: %w", dev, size, required, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
