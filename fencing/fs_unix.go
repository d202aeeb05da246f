//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris

package fencing

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	"golang.org/x/sys/unix"
)

// tryLockDir takes an exclusive flock(2) on the open directory without
// blocking; busy reports that another open file description holds it. flock
// locks belong to the open file description, so a second Store in the same
// process conflicts exactly like one in another process, and the kernel
// drops the lock when the holder dies, even by SIGKILL, so a crashed agent
// never leaves a stale lock behind.
func tryLockDir(d *os.File) (busy bool, err error) {
	for {
		err = unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return true, nil
		}
		return false, &os.PathError{Op: "flock", Path: d.Name(), Err: err}
	}
}

func unlockDir(d *os.File) error {
	if err := unix.Flock(int(d.Fd()), unix.LOCK_UN); err != nil {
		return &os.PathError{Op: "flock unlock", Path: d.Name(), Err: err}
	}
	return nil
}

// writeFileAtomic replaces dir/name with data so that a crash at any point
// leaves either the old file or the new one, complete: renameio writes a
// temporary file in the same directory, fsyncs it and renames it over the
// target. renameio does not fsync the directory, and until the directory is
// synced the rename itself may be lost on power failure, so that is done
// here on d, the directory already open for the lock.
func writeFileAtomic(d *os.File, dir, name string, data []byte) error {
	// WithTempDir keeps the temporary file beside its target: renameio
	// would otherwise probe os.TempDir() on every call, and a temporary file
	// elsewhere is one Open cannot clean up after a crash.
	pf, err := renameio.NewPendingFile(filepath.Join(dir, name),
		renameio.WithTempDir(dir), renameio.WithPermissions(0o600))
	if err != nil {
		return err
	}
	defer pf.Cleanup()
	if _, err := pf.Write(data); err != nil {
		return err
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return err
	}
	return syncDir(d)
}

func syncDir(d *os.File) error { return d.Sync() }
