package kernelvm

import (
	"io"
	"os"
	"time"
)

const (
	// DefaultCacheDir holds everything the lab downloads and builds. It is
	// outside /tmp on purpose: the guest mounts a fresh tmpfs on /tmp, so
	// nothing the guest must see (test binaries, run scripts) may live there.
	DefaultCacheDir = "/var/cache/pillar-csi/lab"

	// DefaultKernelABI is the Debian bookworm kernel ABI the lab boots.
	//
	// It is pinned so that every run boots the same kernel and a kernel
	// change is a reviewed commit. Debian's archive keeps only the current
	// 6.1.0-NN ABI, though, and drops the previous one within days of a
	// security update; a pin that has vanished would turn every fresh CI
	// machine red for a reason unrelated to the change under test. So when
	// the pinned ABI is neither cached nor downloadable and no ABI was asked
	// for explicitly, Provision falls back to the ABI that the
	// linux-image-amd64 metapackage names, with a loud warning that asks
	// for the pin to be bumped. An ABI asked for explicitly (Config.Kernel
	// with KernelExplicit) is never replaced: that run fails instead.
	DefaultKernelABI = "6.1.0-57"

	// DefaultMemoryMB and DefaultCPUs size the guest. Loop-backed pools and
	// volume groups live in the guest's tmpfs, so memory bounds them.
	DefaultMemoryMB = 2048
	DefaultCPUs     = 2
)

// Config says where the lab keeps its cache and which kernel it boots.
type Config struct {
	// CacheDir is the lab's one cache directory (DefaultCacheDir if empty).
	CacheDir string

	// KernelABI is the Debian kernel ABI, "6.1.0-NN" (DefaultKernelABI if
	// empty). KernelExplicit forbids falling back to another ABI.
	KernelABI      string
	KernelExplicit bool

	// Log receives progress messages and the output of long steps
	// (apt-get, the ZFS build). os.Stderr if nil.
	Log io.Writer

	// StepTimeout bounds each provisioning command; the ZFS build gets
	// four times as long. 15 minutes if zero.
	StepTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir
	}
	if c.KernelABI == "" {
		c.KernelABI = DefaultKernelABI
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	if c.StepTimeout == 0 {
		c.StepTimeout = 15 * time.Minute
	}
	return c
}
