//go:build !linux

package lvm

import (
	"errors"
	"runtime"
)

// checkNode needs Linux's device numbers.
func checkNode(string, int64, int64) error {
	return errors.New("LVM device nodes are checked only on Linux, not " + runtime.GOOS)
}
