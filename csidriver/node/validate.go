package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/stage"
)

// DefaultFsType is used when a mount capability names no fs_type.
const DefaultFsType = "ext4"

// FsTypes are the filesystems pillar-node creates and grows.
var FsTypes = []string{"ext4", "xfs"}

// invalid is an InvalidArgument status.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func validVolumeID(id string) error {
	if err := export.ValidateVolumeID(id); err != nil {
		return invalid("volume_id: %v", err)
	}
	return nil
}

// validPath accepts an absolute, clean path strictly under the kubelet
// directory: the CO chooses staging and target paths, but a relative path,
// one with "..", or one elsewhere could make pillar-node mount over or
// remove something that is not a volume's.
func (s *Service) validPath(field, p string) error {
	switch {
	case p == "":
		return invalid("%s is missing", field)
	case !filepath.IsAbs(p):
		return invalid("%s %q is not an absolute path", field, p)
	case filepath.Clean(p) != p || slices.Contains(strings.Split(p, "/"), ".."):
		return invalid("%s %q is not a clean path (no '..', '.', '//' or trailing '/')", field, p)
	case p == "/":
		return invalid("%s must not be /", field)
	case strings.ContainsAny(p, "\x00\n"):
		return invalid("%s %q contains NUL or newline", field, p)
	case !strings.HasPrefix(p, s.cfg.KubeletDir+"/"):
		// p is clean, so a prefix test is a path test; kubelet's own
		// directory is not a volume's path either.
		return invalid("%s %q is not under the kubelet directory %s (-kubelet-dir)", field, p, s.cfg.KubeletDir)
	}
	return nil
}

// validRequest checks a volume ID and (field name, path) pairs.
func (s *Service) validRequest(volumeID string, fieldPaths ...string) error {
	if err := validVolumeID(volumeID); err != nil {
		return err
	}
	for i := 0; i+1 < len(fieldPaths); i += 2 {
		if err := s.validPath(fieldPaths[i], fieldPaths[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// capability is a validated volume capability.
type capability struct {
	access     stage.AccessType
	fsType     string   // mount only
	mountFlags []string // mount only
	readOnly   bool     // the access mode only reads
}

// readOnlyModes are the access modes whose stage mounts read-only and
// never makes a filesystem.
var readOnlyModes = []csi.VolumeCapability_AccessMode_Mode{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
}

// supportedModes are ReadWriteOnce, ReadWriteOncePod, ReadOnlyMany and,
// for raw block volumes only, ReadWriteMany.
var supportedModes = append([]csi.VolumeCapability_AccessMode_Mode{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
	csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
}, readOnlyModes...)

func validCapability(c *csi.VolumeCapability) (capability, error) {
	if c == nil {
		return capability{}, invalid("volume_capability is missing")
	}
	mode := c.GetAccessMode().GetMode()
	if !slices.Contains(supportedModes, mode) {
		return capability{}, invalid("access mode %s is not supported (want SINGLE_NODE_WRITER, SINGLE_NODE_SINGLE_WRITER, SINGLE_NODE_READER_ONLY, MULTI_NODE_READER_ONLY, or MULTI_NODE_MULTI_WRITER for a raw block volume)", mode)
	}
	if _, block := c.GetAccessType().(*csi.VolumeCapability_Block); mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER && !block {
		// The controller refuses it too; a filesystem mounted on two
		// nodes at once would be corrupted, so this node never mounts one.
		return capability{}, invalid("access mode MULTI_NODE_MULTI_WRITER is served for raw block volumes only: ext4 and xfs mounted on two nodes at once corrupt each other")
	}
	out := capability{readOnly: slices.Contains(readOnlyModes, mode)}
	switch t := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
		out.access = stage.Block
	case *csi.VolumeCapability_Mount:
		out.access = stage.Mount
		out.fsType = t.Mount.GetFsType()
		if out.fsType == "" {
			out.fsType = DefaultFsType
		}
		if !slices.Contains(FsTypes, out.fsType) {
			return capability{}, invalid("fs_type %q is not supported (want one of %v)", out.fsType, FsTypes)
		}
		if t.Mount.GetVolumeMountGroup() != "" {
			return capability{}, invalid("volume_mount_group is not supported (no VOLUME_MOUNT_GROUP capability)")
		}
		for _, f := range t.Mount.GetMountFlags() {
			// A flag is one mount(8) -o item; these would change what is
			// mounted rather than how.
			if f == "" || strings.ContainsAny(f, ", \x00\n") || f == "bind" || f == "rbind" || f == "remount" {
				return capability{}, invalid("mount flag %q is not allowed", f)
			}
			if _, _, err := mountArgs([]string{f}); err != nil {
				return capability{}, invalid("mount flag %q is not allowed: %v", f, err)
			}
		}
		out.mountFlags = slices.Clone(t.Mount.GetMountFlags())
	default:
		return capability{}, invalid("volume_capability has neither mount nor block access type")
	}
	return out, nil
}

// statusOf turns an internal error into the gRPC status the CO gets; the
// mapping of error kinds to CSI codes lives here only.
func statusOf(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		// A command killed at its deadline too: command.Error wraps the
		// context's error.
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, stage.ErrCorrupt):
		// The CO cannot fix this by retrying; an operator must look at
		// the named file.
		code = codes.FailedPrecondition
	case errors.Is(err, nvmeof.ErrNamespaceNotFound):
		code = codes.Unavailable
	}
	return status.Error(code, fmt.Sprintf("%s: %v", what, err))
}
