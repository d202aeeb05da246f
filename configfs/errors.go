package configfs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// ErrInvalid is wrapped by every error that rejects a name or value before
// the filesystem is touched.
var ErrInvalid = errors.New("invalid configuration")

// Error is the one error type the package returns. Op names the operation
// ("mkdir", "write", "symlink", "rmdir", "validate", ...), Path the configfs
// path (or, for validation, the offending field), and Err the cause: a
// syscall.Errno for filesystem operations, an error wrapping ErrInvalid for
// rejected input, or the context's error when ctx ended between steps.
type Error struct {
	Op   string
	Path string
	Err  error
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "configfs: " + e.Op + ": " + e.Err.Error()
	}
	return "configfs: " + e.Op + " " + e.Path + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// IsNotExist reports whether err says that a configfs object or attribute
// does not exist (ENOENT). A missing attribute usually means an older kernel
// or a kernel built without the feature.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// IsExist reports whether err says that an object already exists (EEXIST),
// including a second symlink to the same subsystem or host.
//
// ENOTEMPTY does not count, although Go's syscall.Errno matches it against
// fs.ErrExist: here it means "in use" (see IsBusy).
func IsExist(err error) bool {
	return errors.Is(err, fs.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY)
}

// IsBusy reports whether the kernel refused because an object is in use:
// EBUSY (a write to an enabled namespace's device_path, an rmdir of a
// subsystem linked from a port or of a host linked from a subsystem) or
// ENOTEMPTY (an rmdir of a group that still has children). A write to a
// port's addr_* attributes while subsystems are linked is refused with
// EACCES instead, which IsBusy does not match because EACCES also means a
// plain permission problem.
func IsBusy(err error) bool {
	return errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.ENOTEMPTY)
}

// IsInvalid reports whether err rejects a name or value, either here before
// anything was written (ErrInvalid) or in the kernel (EINVAL).
func IsInvalid(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, syscall.EINVAL)
}

func invalidf(path, format string, args ...any) error {
	return &Error{Op: "validate", Path: path, Err: fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))}
}
