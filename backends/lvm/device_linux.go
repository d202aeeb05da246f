package lvm

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkNode reports whether path is the block device major:minor.
func checkNode(path string, major, minor int64) error {
	gotMajor, gotMinor, err := blockNode(path)
	if err != nil {
		return err
	}
	if gotMajor != major || gotMinor != minor {
		return fmt.Errorf("%s is device %d:%d, the LV is %d:%d", path, gotMajor, gotMinor, major, minor)
	}
	return nil
}

// blockNode returns the device numbers of the block device node path.
func blockNode(path string) (major, minor int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return 0, 0, fmt.Errorf("%s is not a block device", path)
	}
	return int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev))), nil
}
