package lvm

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/internal/batch"
)

// LVMConfig is passed to every lvm command with --config. Storage nodes
// and the agent's container may have no udev: LVM must not wait for udev
// events (udev_sync=0), must create its /dev/mapper nodes and /dev/VG links
// itself (udev_rules=0), and must scan devices itself
// (obtain_device_list_from_udev=0). The rest of lvm.conf (filters, locking,
// backups) is the node's and applies as it is.
const LVMConfig = "activation { udev_sync=0 udev_rules=0 } devices { obtain_device_list_from_udev=0 }"

// Config is an LVM store.
type Config struct {
	// VolumeGroup is an existing volume group.
	VolumeGroup string
	// ThinPool is an existing thin pool in VolumeGroup; volumes are thin
	// LVs in it. Empty: volumes are linear LVs.
	ThinPool string
	// AllowUnzeroedThinPool accepts a ThinPool that does not zero the
	// chunks it provisions (created or changed with --zero n). Without it
	// such a pool is refused (backends.ErrThinPoolNotZeroing) by Create and
	// Capacity: a write smaller than the pool's chunk size provisions a
	// whole chunk and leaves the rest of it as a deleted volume left it, so
	// a new volume can read a previous volume's data. Set it only when every
	// volume of the pool may read every other's old data.
	AllowUnzeroedThinPool bool
	// OvercommitRatio is the ratio of the overcommit rule for thin LVs
	// (package backends); 0 means 1. It must be 1 or more.
	OvercommitRatio float64
	// RejectDevices are regular expressions (LVM's syntax) of device paths
	// LVM must never scan, such as "^/dev/zd" and "^/dev/nvme": the
	// exported volumes, whose contents belong to the tenants. A tenant's
	// volume group inside an exported volume must never be seen, let alone
	// activated, by the storage node. Each becomes an r|…| entry of
	// devices/global_filter, which then replaces any global_filter of the
	// node's lvm.conf for the commands the backend runs.
	RejectDevices []string
	// Runner runs lvm; command.Exec{} if nil.
	Runner command.Runner
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9+_.][A-Za-z0-9+_.-]*$`)

func validName(what, s string) error {
	if len(s) > maxDMName || !nameRE.MatchString(s) || s == "." || s == ".." {
		return fmt.Errorf("%s %q: must be an LVM name: letters, digits, '+', '_', '.' and '-', not starting with '-', not '.' or '..'", what, s)
	}
	return nil
}

func (c *Config) validate() error {
	if err := validName("volume group", c.VolumeGroup); err != nil {
		return err
	}
	// Every volume ID must get a name: at worst the hashed one.
	if n := dmNameLen(c.VolumeGroup) + 1 + len(hashedPrefix) + 32 + layerReserve; n > maxDMName {
		return fmt.Errorf("volume group %q: name too long: its LVs' device-mapper names would exceed %d bytes", c.VolumeGroup, maxDMName)
	}
	if c.ThinPool != "" {
		if err := validName("thin pool", c.ThinPool); err != nil {
			return err
		}
	}
	for _, r := range c.RejectDevices {
		if r == "" || strings.ContainsAny(r, "|\"\n\\") {
			return fmt.Errorf("rejected devices %q: must be a non-empty regular expression without '|', '\"', '\\' or a newline", r)
		}
		if _, err := regexp.Compile(r); err != nil {
			return fmt.Errorf("rejected devices %q: %w", r, err)
		}
	}
	if c.OvercommitRatio != 0 && (c.OvercommitRatio < 1 || math.IsNaN(c.OvercommitRatio) || math.IsInf(c.OvercommitRatio, 0)) {
		return fmt.Errorf("overcommit ratio %v: must be 1 or more", c.OvercommitRatio)
	}
	return nil
}

// New returns the backend of an LVM store. It validates the configuration
// but runs nothing: a missing volume group or thin pool is reported by the
// first operation.
func New(c Config) (*Backend, error) {
	if err := c.validate(); err != nil {
		return nil, &backends.Error{Op: "configure", Store: c.VolumeGroup, Err: fmt.Errorf("%w: %w", backends.ErrInvalidArgument, err)}
	}
	b := &Backend{vg: c.VolumeGroup, thinPool: c.ThinPool, allowUnzeroed: c.AllowUnzeroedThinPool, ratio: c.OvercommitRatio,
		config: commandConfig(c.RejectDevices), run: c.Runner, checkNode: checkNode, blockNode: blockNode}
	b.store = b.vg
	if b.thinPool != "" {
		b.store += "/" + b.thinPool
	}
	if b.run == nil {
		b.run = command.Exec{}
	}
	b.lookups = batch.Group[lv]{Max: maxListed, Run: b.listLVs}
	if b.ratio == 0 {
		b.ratio = 1
	}
	return b, nil
}

// commandConfig is the --config of the backend's lvm commands.
func commandConfig(reject []string) string {
	if len(reject) == 0 {
		return LVMConfig
	}
	entries := make([]string, len(reject))
	for i, r := range reject {
		entries[i] = `"r|` + r + `|"`
	}
	// One devices section: LVMConfig's, with the filter added.
	return strings.TrimSuffix(LVMConfig, " }") + " global_filter=[ " + strings.Join(entries, ", ") + " ] }"
}
