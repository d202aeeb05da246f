package configfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
)

// RevalidateSize makes nvmet re-read the size of the device behind
// namespace nsid of subsystem nqn, after the device grew. Connected
// initiators then get a namespace-attribute-changed event and see the new
// size without reconnecting.
//
// The kernel's rules (Linux 6.1, proven by the kerneltest package):
//   - nvmet learns a device's size when the namespace is enabled and when
//     an initiator identifies the namespace; between those it keeps the
//     old size. The write-only attribute revalidate_size (Linux 5.11 and
//     later) re-reads it at once.
//   - A write to revalidate_size of a disabled namespace fails with
//     EINVAL: RevalidateSize returns that error. A disabled namespace has
//     no initiators to tell; enabling it reads the size anyway.
//   - On a kernel without the attribute RevalidateSize returns an error
//     for which errors.Is(err, errors.ErrUnsupported) holds; initiators
//     then see the new size at their next identify.
//
// A subsystem or namespace that does not exist is an IsNotExist error.
// The namespace is found as Read finds it, also under a directory name
// another tool chose ("0x1").
func (f *FS) RevalidateSize(ctx context.Context, nqn string, nsid uint32) error {
	if err := ValidateNQN(nqn); err != nil {
		return err
	}
	if nsid == 0 || nsid == nsidAll {
		return invalidf("NSID", "%d is reserved; use 1 to %d", nsid, uint32(nsidAll-1))
	}
	unlock := f.subsystems.lock(nqn)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return &Error{Op: "revalidate", Path: nqn, Err: err}
	}
	names, err := f.listDirs(f.subsystemDir(nqn) + "/namespaces")
	if err != nil {
		if IsNotExist(err) {
			if perr := f.nvmetPresent(); perr != nil {
				return perr
			}
		}
		return err
	}
	dir := ""
	for _, name := range names {
		if n, err := parseID(name, 32); err == nil && uint32(n) == nsid && (dir == "" || name == uitoa(n)) {
			dir = f.namespaceDir(nqn, name)
		}
	}
	if dir == "" {
		return &Error{Op: "revalidate", Path: f.namespaceDir(nqn, uitoa(uint64(nsid))), Err: fs.ErrNotExist}
	}
	entries, err := f.sys.readDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.name == "revalidate_size" {
			return f.sys.writeAttr(dir+"/revalidate_size", "1")
		}
	}
	return &Error{Op: "revalidate", Path: dir + "/revalidate_size",
		Err: fmt.Errorf("this kernel's nvmet has no revalidate_size (Linux 5.11 and later): %w", errors.ErrUnsupported)}
}
