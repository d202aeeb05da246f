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

// blockNode needs Linux's device numbers.
func blockNode(string) (major, minor int64, err error) {
	return 0, 0, errors.New("LVM device nodes are read only on Linux, not " + runtime.GOOS)
}
