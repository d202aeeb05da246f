//go:build !linux

package zfs

import (
	"errors"
	"runtime"
)

var errNotLinux = errors.New("zvol device nodes are found only on Linux, not " + runtime.GOOS)

// zvolScan needs Linux's /sys/block.
func zvolScan() ([]zdev, error) { return nil, errNotLinux }

// zvolName needs ZFS's BLKZNAME ioctl.
func zvolName(string) (string, error) { return "", errNotLinux }

// poolImported needs Linux's /proc/spl.
func poolImported(string) (imported, known bool) { return false, false }
