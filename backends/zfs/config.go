package zfs

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/internal/batch"
)

// OwnerProperty is the ZFS user property holding the ID of the volume that
// owns a zvol.
const OwnerProperty = "io.pillar-csi:volume-id"

// DefaultVolBlockSize is the volblocksize of new zvols when the properties
// do not set one: OpenZFS's default since 2.2, stated explicitly so that
// sizes round the same way on every release.
const DefaultVolBlockSize = 16 << 10

// DefaultDeviceTimeout is how long DevicePath waits for ZFS to create a
// zvol's device node when Config.DeviceTimeout is zero.
const DefaultDeviceTimeout = 30 * time.Second

// maxDatasetName is ZFS_MAX_DATASET_NAME_LEN (256) without the NUL.
const maxDatasetName = 255

// Config is a ZFS store.
type Config struct {
	// Pool is an existing zpool.
	Pool string
	// ParentDataset is the dataset under Pool holding the zvols, such as
	// "pillar/volumes"; created (canmount=off) when missing. Empty: the top
	// of the pool.
	ParentDataset string
	// Sparse creates zvols without a refreservation.
	Sparse bool
	// Properties are set on every new zvol (zfs create -o). volblocksize is
	// also the rounding unit. volsize, refreservation, reservation and
	// OwnerProperty are set by the backend and refused here.
	Properties map[string]string
	// OvercommitRatio is the ratio of the overcommit rule for sparse
	// zvols (package backends); 0 means 1. It must be 1 or more.
	OvercommitRatio float64
	// Runner runs zfs and zpool; command.Exec{} if nil. Delete gives zfs
	// program its script on standard input.
	Runner command.InputRunner
	// DeviceTimeout bounds DevicePath's wait for a device node;
	// DefaultDeviceTimeout if zero.
	DeviceTimeout time.Duration
}

var (
	poolRE      = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.:-]*$`)
	componentRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)
	nativeRE    = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	userRE      = regexp.MustCompile(`^[a-z0-9_.+-]+:[a-z0-9_.:+-]+$`)
	blockSizeRE = regexp.MustCompile(`^([0-9]+)([kKmM]?)[bB]?$`)
)

// managed are the properties the backend sets itself.
var managed = []string{"volsize", "refreservation", "reservation", OwnerProperty, SnapshotProperty, CloneProperty}

// validate checks c and returns the volblocksize and the -o arguments of
// zfs create other than the owner property, in a stable order.
func (c *Config) validate() (int64, []string, error) {
	if len(c.Pool) > maxDatasetName || !poolRE.MatchString(c.Pool) {
		return 0, nil, fmt.Errorf("pool %q: must be a ZFS pool name: a letter, then letters, digits, '_', '-', ':' or '.'", c.Pool)
	}
	if c.ParentDataset != "" {
		for comp := range strings.SplitSeq(c.ParentDataset, "/") {
			if !componentRE.MatchString(comp) || comp == "." || comp == ".." {
				return 0, nil, fmt.Errorf("parent dataset %q: must be components of letters, digits, '_', '-', ':' or '.' separated by '/'", c.ParentDataset)
			}
		}
	}
	if c.OvercommitRatio != 0 && (c.OvercommitRatio < 1 || math.IsNaN(c.OvercommitRatio) || math.IsInf(c.OvercommitRatio, 0)) {
		return 0, nil, fmt.Errorf("overcommit ratio %v: must be 1 or more", c.OvercommitRatio)
	}
	if c.DeviceTimeout < 0 {
		return 0, nil, fmt.Errorf("device timeout %v: must not be negative", c.DeviceTimeout)
	}
	vbs := int64(DefaultVolBlockSize)
	props := map[string]string{"volmode": "dev"}
	for _, k := range slices.Sorted(maps.Keys(c.Properties)) {
		v := c.Properties[k]
		if !nativeRE.MatchString(k) && !userRE.MatchString(k) {
			return 0, nil, fmt.Errorf("property %q: not a ZFS property name", k)
		}
		if slices.Contains(managed, k) {
			return 0, nil, fmt.Errorf("property %q is set by pillar-csi and cannot be configured", k)
		}
		if v == "" || len(v) > 1024 || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return 0, nil, fmt.Errorf("property %s=%q: the value must be 1 to 1024 printable characters", k, v)
		}
		if k == "volmode" && v != "dev" && v != "none" {
			return 0, nil, fmt.Errorf("property volmode=%s: must be dev (the default) or none; with full, geom or default the storage node's kernel would scan the partition tables and LVM labels a tenant writes into its volume", v)
		}
		if k == "volblocksize" {
			n, err := parseBlockSize(v)
			if err != nil {
				return 0, nil, err
			}
			vbs = n
			continue
		}
		props[k] = v
	}
	args := []string{"-o", "volblocksize=" + strconv.FormatInt(vbs, 10)}
	for _, k := range slices.Sorted(maps.Keys(props)) {
		args = append(args, "-o", k+"="+props[k])
	}
	return vbs, args, nil
}

// parseBlockSize reads a volblocksize as zfs accepts it ("16K", "16k",
// "16384", "1M") and checks ZFS's rule: a power of two from 512 bytes to
// 16 MiB (the pool refuses sizes above 128K without large_blocks).
func parseBlockSize(s string) (int64, error) {
	m := blockSizeRE.FindStringSubmatch(s)
	bad := fmt.Errorf("volblocksize %q: must be a power of two from 512 to 16M, such as 16K", s)
	if m == nil {
		return 0, bad
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	// Above 16M before the suffix is above it after, and the shift below
	// could wrap a huge number to a valid size ("17592186044417M" to 1M).
	if err != nil || n > 16<<20 {
		return 0, bad
	}
	switch m[2] {
	case "k", "K":
		n <<= 10
	case "m", "M":
		n <<= 20
	}
	if n < 512 || n > 16<<20 || n&(n-1) != 0 {
		return 0, bad
	}
	return n, nil
}

// New returns the backend of a ZFS store. It validates the configuration
// but runs nothing: a missing pool is reported by the first operation.
func New(c Config) (*Backend, error) {
	vbs, opts, err := c.validate()
	if err != nil {
		return nil, &backends.Error{Op: "configure", Store: c.Pool, Err: fmt.Errorf("%w: %w", backends.ErrInvalidArgument, err)}
	}
	b := &Backend{
		busyRetries:   5,
		busyDelay:     time.Second,
		pool:          c.Pool,
		parent:        c.Pool,
		sparse:        c.Sparse,
		volBlockSize:  vbs,
		createOpts:    opts,
		ratio:         c.OvercommitRatio,
		run:           c.Runner,
		deviceTimeout: c.DeviceTimeout,
		zvols:         newZvolIndex(zvolScan, zvolName),
		poolImported:  poolImported,
	}
	if c.ParentDataset != "" {
		b.parent = c.Pool + "/" + c.ParentDataset
	}
	if b.run == nil {
		b.run = command.Exec{}
	}
	b.lookups = batch.Group[zvol]{Max: maxListed, Run: b.listVolumes}
	if b.ratio == 0 {
		b.ratio = 1
	}
	if b.deviceTimeout == 0 {
		b.deviceTimeout = DefaultDeviceTimeout
	}
	return b, nil
}
