package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/stage"
)

// NodePublishVolume bind-mounts the staged filesystem onto the target
// directory, or the volume's block device onto the target file; read-only
// when asked (or when the access mode only reads).
//
// For a block volume a read-only bind mount is advisory: the kernel does
// not refuse a write open of a device node on a read-only mount. What
// keeps a read-only publication of a read-write volume from writing is the
// container runtime's device cgroup (kubelet hands the device over
// read-only); a volume staged with a reader-only access mode is read-only
// in the block layer itself (see NodeStageVolume).
func (s *Service) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	volumeID, target := req.GetVolumeId(), req.GetTargetPath()
	if err := s.validRequest(volumeID, "staging_target_path", req.GetStagingTargetPath(), "target_path", target); err != nil {
		return nil, err
	}
	c, err := validCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	unlock, log, err := s.begin(volumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()

	r, err := s.stagedRecord(volumeID, codes.FailedPrecondition)
	switch {
	case err != nil:
		return nil, err
	case r.StagingPath != req.GetStagingTargetPath():
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged at %s, not %s", volumeID, r.StagingPath, req.GetStagingTargetPath())
	case r.AccessType != c.access:
		return nil, invalid("volume %s is staged with %s access, the request asks for %s", volumeID, r.AccessType, c.access)
	case c.access == stage.Mount && c.fsType != r.FsType:
		return nil, invalid("volume %s is staged with fs_type %s, the request asks for %s", volumeID, r.FsType, c.fsType)
	}
	readOnly := req.GetReadonly() || c.readOnly

	mounted, corrupted, err := s.isMounted(target)
	if err != nil {
		return nil, statusOf("check target path", err)
	}
	if mounted {
		if corrupted {
			return nil, status.Errorf(codes.FailedPrecondition, "target path %s is a corrupted mount; unpublish it first", target)
		}
		ro, err := s.mountedReadOnly(target)
		if err != nil {
			return nil, statusOf("check target path", err)
		}
		if ro != readOnly {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is already published at %s with read-only %v", volumeID, target, ro)
		}
		log.Info("already published", "target_path", target)
		return &csi.NodePublishVolumeResponse{}, nil
	}

	source := r.StagingPath
	if r.AccessType == stage.Block {
		id, _ := export.For(volumeID)
		dev, ok, err := s.nvme.FindNamespace(id)
		if err != nil {
			return nil, statusOf("find namespace", err)
		}
		if !ok {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s: no block device with uuid %s (controller gone?)", volumeID, id.UUID)
		}
		source = s.nvme.DevicePath(dev)
		// The bind target of a device is a file.
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return nil, statusOf("create target path", err)
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
		if err != nil {
			return nil, statusOf("create target file", err)
		}
		f.Close()
	} else if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, statusOf("create target path", err)
	}
	// mount-utils turns "bind","ro" into a bind mount and a read-only
	// remount: a bind mount ignores ro on its first mount(2).
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	if err := s.mounter.Mount(source, target, "", opts); err != nil {
		return nil, statusOf("bind mount", err)
	}
	log.Info("published", "source", source, "target_path", target, "read_only", readOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

// mountedReadOnly reports whether the mount at p is read-only.
func (s *Service) mountedReadOnly(p string) (bool, error) {
	mps, err := s.mounter.List()
	if err != nil {
		return false, err
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		resolved = p
	}
	// The last mount on p is the visible one.
	for i := len(mps) - 1; i >= 0; i-- {
		if mps[i].Path == resolved {
			return slices.Contains(mps[i].Opts, "ro"), nil
		}
	}
	return false, errors.New(p + " is not in the mount table")
}

// NodeUnpublishVolume unmounts the target and removes it. It is
// idempotent, and a corrupted mount is unmounted, not skipped.
func (s *Service) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	volumeID, target := req.GetVolumeId(), req.GetTargetPath()
	if err := s.validRequest(volumeID, "target_path", target); err != nil {
		return nil, err
	}
	unlock, log, err := s.begin(volumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Not mount.CleanupMountPoint: it treats EIO and friends as a corrupted
	// mount only when stat(2) of the path reports them, not when the
	// mount-point check does; s.unmount counts both as mounted.
	if err := s.unmount(target); err != nil {
		return nil, statusOf("unmount", err)
	}
	// The CSI spec has the plugin delete what it created at target_path:
	// the directory, or the file a block volume was bound onto.
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, statusOf("remove target path", err)
	}
	log.Info("unpublished", "target_path", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
