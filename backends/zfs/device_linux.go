package zfs

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/internal/errs"
)

// blkZName is ZFS's BLKZNAME ioctl, _IOR(0x12, 125, char[ZFS_MAX_DATASET_NAME_LEN])
// (include/sys/fs/zfs.h): it returns the dataset name of a zvol device.
const (
	datasetNameBuf = maxDatasetName + 1
	blkZName       = 2<<30 | datasetNameBuf<<16 | 0x12<<8 | 125
)

// findZvol returns the /dev/zdN node of the zvol named dataset, or an error
// wrapping ErrNotFound if no device has that name yet.
func findZvol(dataset string) (string, error) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		// Only whole devices are in /sys/block; a zvol with volmode=full
		// has its partitions (zd0p1) under its own directory.
		if !strings.HasPrefix(e.Name(), "zd") {
			continue
		}
		dev := filepath.Join("/dev", e.Name())
		name, err := zvolName(dev)
		if err != nil {
			continue // being removed, or its node not made yet
		}
		if name == dataset {
			return dev, nil
		}
	}
	return "", errs.New(backends.ErrNotFound, nil, "no /dev/zd* device of %s", dataset)
}

func zvolName(dev string) (string, error) {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var buf [datasetNameBuf]byte
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), blkZName, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return "", &os.PathError{Op: "ioctl BLKZNAME", Path: dev, Err: errno}
	}
	if i := bytes.IndexByte(buf[:], 0); i >= 0 {
		return string(buf[:i]), nil
	}
	return string(buf[:]), nil
}
