package node

import (
	"context"
	"log/slog"
	"os"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/stage"
)

// NodeStageVolume connects the volume's subsystem, finds its namespace by
// UUID/NGUID, makes a filesystem on a blank device and mounts it at the
// staging path (mount access), or only connects (block access).
//
// The stage record is written before the connect, marked incomplete, so
// that a stage interrupted by a crash can still be unstaged: without it,
// NodeUnstageVolume would not know which controller to delete.
func (s *Service) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	volumeID := req.GetVolumeId()
	if err := s.validRequest(volumeID, "staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	c, err := validCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	vc, err := export.ParseVolumeContext(volumeID, req.GetVolumeContext())
	if err != nil {
		return nil, invalid("volume_context: %v", err)
	}
	id, _ := export.For(volumeID) // valid: checked above
	unlock, log, err := s.begin(volumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()

	want := stage.Record{
		VolumeID:     volumeID,
		SubsystemNQN: vc.SubsystemNQN,
		Transport:    vc.Transport,
		Address:      vc.Address.String(),
		Port:         vc.Port,
		HostNQN:      s.cfg.HostNQN,
		UUID:         id.UUID,
		NGUID:        id.NGUID,
		AccessType:   c.access,
		FsType:       c.fsType,
		MountFlags:   c.mountFlags,
		ReadOnly:     c.readOnly,
		StagingPath:  req.GetStagingTargetPath(),
	}
	have, ok, err := s.store.Get(volumeID)
	if err != nil {
		return nil, statusOf("read stage record", err)
	}
	if ok && !sameStage(have, want) {
		return nil, status.Errorf(codes.AlreadyExists,
			"volume %s is already staged at %s as %s (fs %q, flags %v, read-only %v, target %s:%d); this request differs",
			volumeID, have.StagingPath, have.AccessType, have.FsType, have.MountFlags, have.ReadOnly, have.Address, have.Port)
	}
	if !ok {
		if err := s.store.Put(want); err != nil {
			return nil, statusOf("write stage record", err)
		}
	}

	target := nvmeof.Target{Transport: vc.Transport, Address: vc.Address, Port: vc.Port, NQN: vc.SubsystemNQN}
	ctrl, reused, err := s.nvme.Connect(ctx, target, nvmeof.Host{NQN: s.cfg.HostNQN, ID: s.cfg.HostID}, vc.Connect)
	if err != nil {
		return nil, statusOf("connect", err)
	}
	log.Info("connected", "controller", ctrl, "reused", reused, "subsystem", vc.SubsystemNQN)
	want.Controller = ctrl

	wctx, cancel := context.WithTimeout(ctx, s.cfg.NamespaceTimeout)
	dev, err := s.nvme.WaitNamespace(wctx, id)
	cancel()
	if err != nil {
		return nil, statusOf("find namespace", err)
	}
	devPath := s.nvme.DevicePath(dev)
	log.Info("namespace found", "device", devPath, "uuid", id.UUID)

	switch {
	case c.access == stage.Mount:
		if err := s.stageMount(ctx, log, devPath, want); err != nil {
			return nil, err
		}
	case c.readOnly:
		// A read-only bind mount does not stop writes through a device
		// node (the kernel's may_open ignores MNT_READONLY for block
		// devices), so a reader-only block volume is made read-only in
		// the block layer: every writer gets EPERM.
		if err := s.cfg.setReadOnly(devPath); err != nil {
			return nil, statusOf("set block device read-only", err)
		}
		log.Info("block device set read-only", "device", devPath)
	}
	want.Complete = true
	if err := s.store.Put(want); err != nil {
		return nil, statusOf("write stage record", err)
	}
	log.Info("staged", "access", c.access, "staging_path", want.StagingPath)
	return &csi.NodeStageVolumeResponse{}, nil
}

// sameStage compares what a repeated NodeStageVolume may not change.
func sameStage(a, b stage.Record) bool {
	return a.SubsystemNQN == b.SubsystemNQN && a.Transport == b.Transport && a.Address == b.Address &&
		a.Port == b.Port && a.AccessType == b.AccessType && a.FsType == b.FsType &&
		slices.Equal(a.MountFlags, b.MountFlags) && a.ReadOnly == b.ReadOnly && a.StagingPath == b.StagingPath
}

func (s *Service) stageMount(ctx context.Context, log *slog.Logger, devPath string, r stage.Record) error {
	if err := os.MkdirAll(r.StagingPath, 0o750); err != nil {
		return statusOf("create staging path", err)
	}
	mounted, corrupted, err := s.isMounted(r.StagingPath)
	if err != nil {
		return statusOf("check staging path", err)
	}
	if corrupted {
		return status.Errorf(codes.FailedPrecondition, "staging path %s is a corrupted mount; unstage the volume first", r.StagingPath)
	}
	if mounted {
		// A repeated stage, if what is mounted there is this volume's
		// device; anything else is not ours to use or to unmount.
		src, _, err := mount.GetDeviceNameFromMount(s.mounter, r.StagingPath)
		if err != nil {
			return statusOf("check staging path", err)
		}
		if src != devPath {
			return status.Errorf(codes.FailedPrecondition, "staging path %s already has %s mounted, not volume %s's device %s", r.StagingPath, src, r.VolumeID, devPath)
		}
		log.Info("already mounted", "staging_path", r.StagingPath)
		// A retry after a grow that failed (below) finds the volume
		// mounted: grow it now.
		return s.growStaged(ctx, r, devPath)
	}
	formatted, err := s.prepareFilesystem(ctx, devPath, r.FsType, r.ReadOnly)
	if err != nil {
		return statusOf("prepare filesystem", err)
	}
	if formatted {
		log.Info("made filesystem", "device", devPath, "fs_type", r.FsType)
	}
	opts := slices.Clone(r.MountFlags)
	if r.ReadOnly {
		opts = append(opts, "ro")
	}
	if r.FsType == "xfs" && !slices.Contains(opts, "nouuid") {
		// A restored or cloned volume holds its source's filesystem,
		// UUID and all, and xfs refuses to mount a second filesystem of
		// one UUID on a node ("Filesystem has duplicate UUID"): a clone
		// could not be used beside its source.
		opts = append(opts, "nouuid")
	}
	if err := s.mounter.Mount(devPath, r.StagingPath, r.FsType, opts); err != nil {
		return statusOf("mount", err)
	}
	log.Info("mounted", "device", devPath, "staging_path", r.StagingPath, "options", opts)
	if formatted {
		return nil
	}
	return s.growStaged(ctx, r, devPath)
}

// growStaged grows the filesystem of a volume staged read-write to its
// device. It may be smaller: a volume restored from a snapshot or cloned
// into a larger size (the CO calls no NodeExpandVolume for it), or an
// expansion whose node step was lost. Growing a filesystem that fills its
// device is a no-op.
func (s *Service) growStaged(ctx context.Context, r stage.Record, devPath string) error {
	if r.ReadOnly {
		return nil
	}
	if err := s.resize(ctx, r.FsType, devPath, r.StagingPath); err != nil {
		return statusOf("grow the filesystem to its device", err)
	}
	return nil
}

// NodeUnstageVolume unmounts the staging path, deletes the volume's
// controller(s) and removes the stage record. It works from the record
// alone, and is idempotent: a volume without a record is not staged.
func (s *Service) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	volumeID := req.GetVolumeId()
	if err := s.validRequest(volumeID, "staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	unlock, log, err := s.begin(volumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()

	r, ok, err := s.store.Get(volumeID)
	if err != nil {
		return nil, statusOf("read stage record", err)
	}
	if !ok {
		// Never staged here, or already unstaged. The staging path is
		// still unmounted in case a mount outlived its record.
		if err := s.unmount(req.GetStagingTargetPath()); err != nil {
			return nil, statusOf("unmount", err)
		}
		log.Info("not staged; nothing to do")
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if r.StagingPath != req.GetStagingTargetPath() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged at %s, not %s", volumeID, r.StagingPath, req.GetStagingTargetPath())
	}
	if r.AccessType == stage.Mount {
		if err := s.unmount(r.StagingPath); err != nil {
			return nil, statusOf("unmount", err)
		}
		log.Info("unmounted", "staging_path", r.StagingPath)
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DisconnectTimeout)
	err = s.nvme.Disconnect(dctx, r.SubsystemNQN)
	cancel()
	if err != nil {
		return nil, statusOf("disconnect", err)
	}
	log.Info("disconnected", "subsystem", r.SubsystemNQN)
	if err := s.store.Delete(volumeID); err != nil {
		return nil, statusOf("remove stage record", err)
	}
	log.Info("unstaged")
	return &csi.NodeUnstageVolumeResponse{}, nil
}
