//go:build !linux

package configfs

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// realSys on systems without configfs goes through package os, so that the
// package builds, reads fixture trees and runs its tests everywhere; there
// is no nvmet to configure outside Linux.
type realSys struct{}

func unwrapPath(op, path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	return pathErr(op, path, err)
}

func (realSys) mkdir(path string) error { return unwrapPath("mkdir", path, os.Mkdir(path, 0o755)) }

func (realSys) rmdir(path string) error { return unwrapPath("rmdir", path, os.Remove(path)) }

func (realSys) symlink(target, link string) error {
	return unwrapPath("symlink", link, os.Symlink(target, link))
}

func (realSys) unlink(path string) error { return unwrapPath("unlink", path, os.Remove(path)) }

func (realSys) readlink(path string) (string, error) {
	t, err := os.Readlink(path)
	return t, unwrapPath("readlink", path, err)
}

// noFollow refuses what the Linux implementation's O_NOFOLLOW refuses: a
// symlink where a group or an attribute belongs (see sys_linux.go); and,
// where Linux opens with O_NONBLOCK, anything but a directory or a
// regular file, whose open could block. A check before the open, where
// Linux checks in it; fixture trees do not change under a reader.
func noFollow(op, path string, errno syscall.Errno) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return unwrapPath(op, path, err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return pathErr(op, path, errno)
	case !fi.IsDir() && !fi.Mode().IsRegular():
		return pathErr(op, path, syscall.EINVAL)
	}
	return nil
}

func (realSys) readDir(path string) ([]dirEntry, error) {
	if err := noFollow("open", path, syscall.ENOTDIR); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, unwrapPath("readdir", path, err)
	}
	out := make([]dirEntry, len(ents))
	for i, e := range ents {
		t := e.Type()
		out[i] = dirEntry{name: e.Name(), dir: t.IsDir(), file: t.IsRegular(), link: t&os.ModeSymlink != 0}
	}
	return out, nil
}

func (realSys) readAttr(path string) (string, error) {
	if err := noFollow("open", path, syscall.ELOOP); err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", unwrapPath("open", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttrRead+1))
	if err == nil && len(b) > maxAttrRead {
		return "", pathErr("read", path, syscall.EFBIG)
	}
	return string(b), unwrapPath("read", path, err)
}

func (realSys) writeAttr(path, value string) error {
	if err := noFollow("open", path, syscall.ELOOP); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return unwrapPath("open", path, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return unwrapPath("write", path, err)
}
