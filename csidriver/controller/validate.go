package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// DefaultCapacity is the size of a volume whose request names none.
const DefaultCapacity = 1 << 30

// volumeIDFor maps a CreateVolume name to the volume ID: the name itself
// when it is a valid volume ID (the external-provisioner's pvc-<uid>
// names are), else a digest of it, so the same name always maps to the
// same ID.
func volumeIDFor(name string) string {
	if export.ValidateVolumeID(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "vol-" + hex.EncodeToString(sum[:20])
}

// checkCapabilities refuses what pillar-csi cannot serve: access modes
// other than single-node writer and multi-node reader, and filesystems
// other than ext4 and xfs.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return fmt.Errorf("volume capabilities are required")
	}
	for _, c := range caps {
		if _, err := accessModeOf(c); err != nil {
			return err
		}
		switch t := c.GetAccessType().(type) {
		case *csi.VolumeCapability_Block:
		case *csi.VolumeCapability_Mount:
			switch t.Mount.GetFsType() {
			case "", string(v1alpha1.FSTypeExt4), string(v1alpha1.FSTypeXFS):
			default:
				return fmt.Errorf("filesystem %q is not supported: use ext4 or xfs", t.Mount.GetFsType())
			}
		default:
			return fmt.Errorf("access type (block or mount) is required")
		}
	}
	return nil
}

// accessModeOf is the publication access mode of a capability.
func accessModeOf(c *csi.VolumeCapability) (v1alpha1.AccessMode, error) {
	switch m := c.GetAccessMode().GetMode(); m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return v1alpha1.AccessReadWriteOnce, nil
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER:
		return v1alpha1.AccessReadWriteOncePod, nil
	case csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:
		return v1alpha1.AccessReadOnlyMany, nil
	default:
		return "", fmt.Errorf("access mode %s is not supported: pillar-csi serves single-node writers and multi-node readers", m)
	}
}

// capacityFor picks the size to create within the range: the required
// bytes, else the limit, else DefaultCapacity (capped by the limit).
func capacityFor(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, fmt.Errorf("capacity range %d..%d: negative", req, lim)
	case lim > 0 && req > lim:
		return 0, fmt.Errorf("capacity range: required %d bytes exceeds the limit %d", req, lim)
	case req > 0:
		return req, nil
	case lim > 0:
		return min(lim, DefaultCapacity), nil
	}
	return DefaultCapacity, nil
}

// fits reports whether size satisfies the range.
func fits(size int64, r *csi.CapacityRange) bool {
	return size >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || size <= r.GetLimitBytes())
}
