package zfs

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// blkZName is ZFS's BLKZNAME ioctl, _IOR(0x12, 125, char[ZFS_MAX_DATASET_NAME_LEN])
// (include/sys/fs/zfs.h): it returns the dataset name of a zvol device.
const (
	datasetNameBuf = maxDatasetName + 1
	blkZName       = 2<<30 | datasetNameBuf<<16 | 0x12<<8 | 125
)

// zvolScan lists the whole zvol devices of /sys/block (a zvol with
// volmode=full has its partitions, zd0p1, under its own directory) with
// their diskseq.
func zvolScan() ([]zdev, error) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil, err
	}
	var out []zdev
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "zd") {
			continue
		}
		seq, _ := os.ReadFile(filepath.Join("/sys/block", e.Name(), "diskseq"))
		out = append(out, zdev{dev: filepath.Join("/dev", e.Name()), seq: strings.TrimSpace(string(seq))})
	}
	return out, nil
}

// zvolName asks a zvol device node for its dataset name.
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

// kstatDir is where the ZFS module keeps its statistics: a directory for
// each imported pool, besides the files of its global statistics.
const kstatDir = "/proc/spl/kstat/zfs"

// poolImported reports whether pool is imported, from its statistics
// directory, and whether that could be told (known is false without the
// ZFS module's /proc/spl, as in a container that does not show it).
func poolImported(pool string) (imported, known bool) {
	if fi, err := os.Stat(kstatDir); err != nil || !fi.IsDir() {
		return false, false
	}
	fi, err := os.Stat(filepath.Join(kstatDir, pool))
	return err == nil && fi.IsDir(), true
}
