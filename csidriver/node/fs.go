package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

// signature is what blkid found on a device.
type signature struct {
	fsType string // TYPE
	ptType string // PTTYPE
}

func (s signature) blank() bool { return s.fsType == "" && s.ptType == "" }

func (s signature) String() string {
	switch {
	case s.fsType != "":
		return "a " + s.fsType + " filesystem"
	case s.ptType != "":
		return "a " + s.ptType + " partition table"
	}
	return "nothing"
}

// probe reads the device's signatures with a low-level blkid probe (-p:
// the device itself, not blkid's cache). blkid exits 2 when it finds
// nothing; any other failure, including an ambivalent probe (exit 8), is
// an error, so a device is only ever formatted when it is known blank.
func (s *Service) probe(ctx context.Context, dev string) (signature, error) {
	out, err := s.run.Run(ctx, "blkid", "-p", "-o", "export", dev)
	if ce := (*command.Error)(nil); errors.As(err, &ce) && ce.ExitCode == 2 {
		return signature{}, nil
	}
	if err != nil {
		return signature{}, err
	}
	var sig signature
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "TYPE":
			sig.fsType = v
		case "PTTYPE":
			sig.ptType = v
		}
	}
	if sig.blank() {
		return signature{}, fmt.Errorf("blkid -p %s found a signature but no TYPE or PTTYPE: %q", dev, out)
	}
	return sig, nil
}

// mkfs makes a filesystem on a blank device. mkfs.ext4 gets -F because it
// asks for confirmation on a whole-disk device otherwise; mkfs.xfs gets no
// -f, so it still refuses a device that gained a signature since the probe.
func (s *Service) mkfs(ctx context.Context, fsType, dev string) error {
	var err error
	switch fsType {
	case "ext4":
		_, err = s.run.Run(ctx, "mkfs.ext4", "-F", "-q", dev)
	case "xfs":
		_, err = s.run.Run(ctx, "mkfs.xfs", "-q", dev)
	default:
		err = fmt.Errorf("mkfs: unsupported filesystem %q", fsType)
	}
	return err
}

// prepareFilesystem makes sure dev holds fsType: it formats a blank
// device (unless the volume is read-only) and never touches one with any
// signature. A signature of another kind is FailedPrecondition, not data
// loss.
func (s *Service) prepareFilesystem(ctx context.Context, dev, fsType string, readOnly bool) (formatted bool, err error) {
	sig, err := s.probe(ctx, dev)
	if err != nil {
		return false, err
	}
	switch {
	case sig.blank() && readOnly:
		return false, status.Errorf(codes.FailedPrecondition, "device %s is blank and the access mode is read-only: no filesystem to mount", dev)
	case sig.blank():
		return true, s.mkfs(ctx, fsType, dev)
	case sig.fsType != fsType:
		return false, status.Errorf(codes.FailedPrecondition, "device %s holds %s, not %s; refusing to reformat it", dev, sig, fsType)
	}
	return false, nil
}

// resize grows the filesystem of a staged volume to its device: ext4
// online through the device, xfs through its mount point (xfs_growfs
// takes only a mounted filesystem).
func (s *Service) resize(ctx context.Context, fsType, dev, mountPoint string) error {
	var err error
	switch fsType {
	case "ext4":
		_, err = s.run.Run(ctx, "resize2fs", dev)
	case "xfs":
		_, err = s.run.Run(ctx, "xfs_growfs", mountPoint)
	default:
		err = fmt.Errorf("resize: unsupported filesystem %q", fsType)
	}
	return err
}

// setBlockReadOnly sets the block layer's read-only flag of dev
// (blockdev --setro). It lasts until the device goes away, which for a
// namespace is the disconnect at unstage.
func setBlockReadOnly(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.BLKROSET, 1); err != nil {
		return &os.PathError{Op: "ioctl BLKROSET", Path: dev, Err: err}
	}
	return nil
}

// isMounted reports whether p is a mount point. A probe that fails with
// EIO, ENOTCONN, ESTALE or EACCES (mount.IsCorruptedMnt) means a mounted
// filesystem in trouble — an fs in kernel shutdown, a device gone — and
// counts as mounted, so that unmount still happens.
func (s *Service) isMounted(p string) (mounted, corrupted bool, err error) {
	mounted, err = s.mounter.IsMountPoint(p)
	switch {
	case err == nil:
		return mounted, false, nil
	case errors.Is(err, os.ErrNotExist):
		return false, false, nil
	case corruptedMount(err):
		return true, true, nil
	}
	return false, false, err
}

// corruptedMount is mount.IsCorruptedMnt for wrapped errors too:
// IsCorruptedMnt only looks at the outermost error's type.
func corruptedMount(err error) bool {
	if mount.IsCorruptedMnt(err) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.ENOTCONN, syscall.ESTALE, syscall.EACCES} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// unmount unmounts p if it is mounted and leaves the directory. It is
// idempotent.
func (s *Service) unmount(p string) error {
	mounted, _, err := s.isMounted(p)
	if err != nil || !mounted {
		return err
	}
	if err := s.mounter.Unmount(p); err != nil {
		return err
	}
	if mounted, _, err := s.isMounted(p); err != nil || mounted {
		return errors.Join(err, fmt.Errorf("%s is still mounted after unmount", p))
	}
	return nil
}
