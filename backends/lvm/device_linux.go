package lvm

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkNode reports whether path is the block device major:minor.
func checkNode(path string, major, minor int64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return fmt.Errorf("%s is not a block device", path)
	}
	if got, want := uint64(st.Rdev), unix.Mkdev(uint32(major), uint32(minor)); got != want {
		return fmt.Errorf("%s is device %d:%d, the LV is %d:%d", path, unix.Major(got), unix.Minor(got), major, minor)
	}
	return nil
}
