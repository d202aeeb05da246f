//go:build !linux

package zfs

import (
	"errors"
	"runtime"
)

// findZvol needs Linux's /sys/block and ZFS's BLKZNAME ioctl.
func findZvol(string) (string, error) {
	return "", errors.New("zvol device nodes are found only on Linux, not " + runtime.GOOS)
}
