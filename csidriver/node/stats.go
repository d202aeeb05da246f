package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/stage"
)

// CSI spec v1.13 replaced NodeGetVolumeStats' VolumeCondition with the
// NodeGetVolumeHealth RPC (capability GET_VOLUME_HEALTH): the abnormal
// condition of a volume is reported there, as INACCESSIBLE entries with a
// CamelCase reason, and NodeGetVolumeStats reports usage only.

// Health reasons.
const (
	ReasonDeviceGone        = "DeviceGone"
	ReasonTargetUnreachable = "TargetUnreachable"
	ReasonNotMounted        = "NotMounted"
	ReasonCorruptedMount    = "CorruptedMount"
	ReasonIOError           = "IOError"
)

// volumeStatus is what one look at a staged volume found.
type volumeStatus struct {
	record   stage.Record
	device   string // nvmeXnY; "" when gone
	usage    []*csi.VolumeUsage
	problems []*csi.VolumeHealth_VolumeHealthEntry // problems; empty when healthy
}

func (v *volumeStatus) problem(reason, format string, args ...any) {
	v.problems = append(v.problems, &csi.VolumeHealth_VolumeHealthEntry{
		Status:  csi.VolumeHealthErrorType_INACCESSIBLE,
		Reason:  reason,
		Message: fmt.Sprintf(format, args...),
	})
}

// inspect examines the volume of stage record r at path (its publish or
// staging path): the namespace's block device, the subsystem's
// controllers, the mount and statfs. It needs no lock: it only reads, and
// the CO polls it while other operations may run.
func (s *Service) inspect(r stage.Record, path string) (*volumeStatus, error) {
	if path == "" {
		path = r.StagingPath
	}
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "volume path %s does not exist", path)
	}
	v := &volumeStatus{record: r}
	id, _ := export.For(r.VolumeID)
	dev, found, err := s.nvme.FindNamespace(id)
	if err != nil {
		return nil, statusOf("find namespace", err)
	}
	if found {
		v.device = dev
	} else {
		v.problem(ReasonDeviceGone, "no block device with namespace uuid %s", id.UUID)
	}
	ctrls, err := s.nvme.Controllers(r.SubsystemNQN)
	if err != nil {
		return nil, statusOf("list controllers", err)
	}
	live := false
	var states []string
	for _, c := range ctrls {
		live = live || c.State == "live"
		states = append(states, c.Name+" "+c.State)
	}
	switch {
	case len(ctrls) == 0:
		v.problem(ReasonTargetUnreachable, "no controller connected to %s", r.SubsystemNQN)
	case !live:
		v.problem(ReasonTargetUnreachable, "target %s:%d unreachable: controller %s", r.Address, r.Port, strings.Join(states, ", "))
	}

	if r.AccessType == stage.Block {
		if found {
			size, err := s.nvme.DeviceSize(dev)
			if err != nil {
				v.problem(ReasonDeviceGone, "%v", err)
			} else {
				v.usage = []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}
			}
		}
		return v, nil
	}
	mounted, corrupted, err := s.isMounted(path)
	switch {
	case err != nil:
		v.problem(ReasonIOError, "volume path %s: %v", path, err)
	case corrupted:
		v.problem(ReasonCorruptedMount, "volume path %s is a corrupted mount (I/O error, filesystem shut down or device gone)", path)
	case !mounted:
		v.problem(ReasonNotMounted, "volume path %s is not mounted", path)
	default:
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil {
			v.problem(ReasonIOError, "statfs %s: %v", path, err)
			break
		}
		bs := int64(st.Bsize)
		v.usage = []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
			{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
		}
	}
	return v, nil
}

// NodeGetVolumeStats reports bytes and inodes of a filesystem volume
// (statfs) or the size of a block volume. A volume that cannot be measured
// gets no usage; NodeGetVolumeHealth says why.
func (s *Service) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if err := validVolumeID(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if req.GetVolumePath() == "" {
		return nil, invalid("volume_path is missing")
	}
	// An unknown volume is NotFound whatever the path, and a path that
	// cannot be the volume's (relative, unclean) means the volume is not
	// there: NotFound too, as the spec and csi-sanity have it.
	r, err := s.stagedRecord(req.GetVolumeId(), codes.NotFound)
	if err != nil {
		return nil, err
	}
	if err := s.validPath("volume_path", req.GetVolumePath()); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s is not at %q: %v", req.GetVolumeId(), req.GetVolumePath(), status.Convert(err).Message())
	}
	v, err := s.inspect(r, req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: v.usage}, nil
}

// NodeGetVolumeHealth reports a volume INACCESSIBLE from this node when
// its block device is gone, no controller of its subsystem is live (the
// target went away and the kernel is reconnecting), or its mount is gone
// or answers with I/O errors. It looks at the publish path when given,
// else the staging path.
//
// Unlike NodeGetVolumeStats it answers for a stage that failed or is still
// in progress too (an incomplete record): the spec lets the CO ask about
// a volume it recently tried to stage, so that a stage that failed
// because the target is unreachable is reported as such, not as NotFound.
func (s *Service) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	volumeID := req.GetVolumeId()
	if err := validVolumeID(volumeID); err != nil {
		return nil, err
	}
	r, ok, err := s.store.Get(volumeID)
	switch {
	case err != nil:
		return nil, statusOf("read stage record", err)
	case !ok:
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged on this node", volumeID)
	}
	path := req.GetVolumePublishPath()
	if path == "" {
		path = req.GetStagingTargetPath()
	}
	if path != "" {
		if err := s.validPath("volume path", path); err != nil {
			return nil, err
		}
	}
	v, err := s.inspect(r, path)
	if err != nil {
		return nil, err
	}
	for _, h := range v.problems {
		s.log.Warn("volume inaccessible", "volume_id", volumeID, "reason", h.Reason, "message", h.Message)
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: volumeID, HealthStatuses: v.problems}}, nil
}
