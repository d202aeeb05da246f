package backends

import (
	"context"
	"fmt"
	"math"
	"regexp"
)

// Backend manages the volumes of one store. See the package documentation
// for the contract every implementation keeps.
type Backend interface {
	// Create makes a volume of at least sizeBytes (rounded up to the
	// store's allocation unit) owned by id, and returns it. If a volume
	// owned by id exists with the same rounded size, Create returns it; one
	// of another size, or a volume of that name that id does not own, is
	// ErrConflict. A volume that does not fit is ErrNoSpace.
	Create(ctx context.Context, id string, sizeBytes int64) (*Volume, error)

	// Delete destroys the volume owned by id. A missing volume is success;
	// a volume of that name that id does not own is ErrConflict and is left
	// alone; a volume still open (exported, mounted) is ErrBusy.
	Delete(ctx context.Context, id string) error

	// Expand grows the volume owned by id to at least sizeBytes (rounded up)
	// and returns it. A size at or below the current size after rounding is
	// success without change if equal and ErrShrink if smaller.
	Expand(ctx context.Context, id string, sizeBytes int64) (*Volume, error)

	// Get returns the volume owned by id: ErrNotFound if there is none,
	// ErrConflict if the name is taken by a volume id does not own.
	Get(ctx context.Context, id string) (*Volume, error)

	// List returns every volume of the store owned by some volume ID,
	// sorted by ID. Volumes without an ownership mark are left out.
	List(ctx context.Context) ([]Volume, error)

	// Capacity reports the store's size and the space available for new
	// volumes under the overcommit rule of the package documentation.
	Capacity(ctx context.Context) (*Capacity, error)

	// DevicePath returns the block device of the volume owned by id: a
	// node that the kernel or the volume manager itself creates, which
	// exists without udev and stays the same for as long as the volume
	// exists and is active. It waits a bounded time for a device that the
	// kernel creates asynchronously.
	DevicePath(ctx context.Context, id string) (string, error)
}

// GetSharer is implemented by a backend whose Gets made at once share
// their commands: however many callers ask, at most one of its Get
// commands runs at a time, so a caller that bounds the commands it runs
// at once (pillar-agent's store slots) need not count Gets. Each Get is
// still answered by a command that started after it was asked.
type GetSharer interface {
	// SharesGets reports whether Gets made at once share their commands.
	SharesGets() bool
}

// Volume is one backend volume.
type Volume struct {
	// ID is the volume ID that owns the volume.
	ID string
	// Name is the backend's name for it: POOL/DATASET/ID for a zvol,
	// VG/LV for a logical volume.
	Name string
	// SizeBytes is the volume's size, a multiple of the store's allocation
	// unit and at least the size that was asked for.
	SizeBytes int64
	// Thin is true for a sparse zvol or a thin LV: its space is taken from
	// the store only as it is written.
	Thin bool
	// DevicePath is the volume's block device node as far as the backend
	// learnt it without activating the volume or waiting for the kernel:
	// List fills it for every volume that has a node, Create, Get and
	// Expand may leave it empty. Empty means no node at the moment: an
	// inactive logical volume, a zvol with volmode=none or one whose node
	// the kernel has not made yet. It is for reports; Backend.DevicePath
	// returns the node to open.
	DevicePath string
}

// Capacity is the space of a store.
type Capacity struct {
	// TotalBytes is the physical size of the pool, volume group or thin
	// pool (for a ZFS store: what its parent dataset can hold, used plus
	// available).
	TotalBytes int64
	// AvailableBytes is the space left for new volumes under the overcommit
	// rule; never negative. With an overcommit ratio above 1 it may exceed
	// TotalBytes.
	AvailableBytes int64
}

// VolumeIDPattern is the form of a volume ID: lowercase letters, digits,
// '-' and '.', starting and ending with a letter or digit. It is the form of
// pillar-csi's volume IDs (a Kubernetes object name), and every such name is
// at once a valid ZFS dataset name component, a valid LVM tag suffix and
// (unless it is reserved by LVM or too long, see package lvm) a valid LV
// name.
const VolumeIDPattern = `^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`

// MaxVolumeIDLength is the longest volume ID in bytes, the limit the CSI
// specification sets for volume IDs.
const MaxVolumeIDLength = 128

var volumeIDRE = regexp.MustCompile(VolumeIDPattern)

// ValidateVolumeID reports whether id can be a volume ID. The error wraps
// ErrInvalidArgument.
func ValidateVolumeID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty volume ID", ErrInvalidArgument)
	case len(id) > MaxVolumeIDLength:
		return fmt.Errorf("%w: volume ID is %d bytes, at most %d allowed", ErrInvalidArgument, len(id), MaxVolumeIDLength)
	case !volumeIDRE.MatchString(id):
		return fmt.Errorf("%w: volume ID %q: only lowercase letters, digits, '-' and '.' are allowed, starting and ending with a letter or digit",
			ErrInvalidArgument, id)
	}
	return nil
}

// ValidateSize refuses a size that is not positive; the error wraps
// ErrInvalidArgument. Backends call it before they run any command.
func ValidateSize(size int64) error {
	if size <= 0 {
		return fmt.Errorf("%w: size %d bytes: must be positive", ErrInvalidArgument, size)
	}
	return nil
}

// RoundUp returns size rounded up to a multiple of unit. It refuses a size
// that is not positive, a unit that is not positive, and a result that
// does not fit in an int64; the error wraps ErrInvalidArgument.
func RoundUp(size, unit int64) (int64, error) {
	if err := ValidateSize(size); err != nil {
		return 0, err
	}
	if unit <= 0 {
		return 0, fmt.Errorf("%w: allocation unit %d bytes: must be positive", ErrInvalidArgument, unit)
	}
	if size > math.MaxInt64-(unit-1) {
		return 0, fmt.Errorf("%w: size %d bytes: too large", ErrInvalidArgument, size)
	}
	return (size + unit - 1) / unit * unit, nil
}

// Available applies the overcommit rule of the package documentation: ratio
// × physical − promised, never negative, saturating instead of overflowing.
// A ratio below 1 counts as 1.
func Available(physical, promised int64, ratio float64) int64 {
	if ratio < 1 || math.IsNaN(ratio) {
		ratio = 1
	}
	var budget int64
	// float64(math.MaxInt64) is 2^63, which int64() cannot hold. Without
	// overcommit the budget is exact: above 2^53 float64(physical) can
	// round up, past the pool.
	if ratio == 1 {
		budget = physical
	} else if f := float64(physical) * ratio; f >= math.MaxInt64 {
		budget = math.MaxInt64
	} else {
		budget = int64(f)
	}
	if promised < 0 {
		promised = 0
	}
	if promised >= budget {
		return 0
	}
	return budget - promised
}
