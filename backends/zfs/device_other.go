//go:build !linux

package zfs

import (
	"errors"
	"runtime"
)

// zvolDevices needs Linux's /sys/block and ZFS's BLKZNAME ioctl.
func zvolDevices() (map[string]string, error) {
	return nil, errors.New("zvol device nodes are found only on Linux, not " + runtime.GOOS)
}
