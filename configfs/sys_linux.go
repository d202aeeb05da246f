package configfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// realSys issues plain system calls. Attribute I/O goes through
// open/read|write/close on raw descriptors: configfs applies a store at
// write(2) time and returns the kernel's errno from that write, and raw
// descriptors spare the fstat and bookkeeping os.File adds to every file.
type realSys struct{}

func (realSys) mkdir(path string) error {
	return pathErr("mkdir", path, retry(func() error { return unix.Mkdir(path, 0o755) }))
}

func (realSys) rmdir(path string) error {
	return pathErr("rmdir", path, retry(func() error { return unix.Rmdir(path) }))
}

func (realSys) symlink(target, link string) error {
	return pathErr("symlink", link, retry(func() error { return unix.Symlink(target, link) }))
}

func (realSys) unlink(path string) error {
	return pathErr("unlink", path, retry(func() error { return unix.Unlink(path) }))
}

func (realSys) readlink(path string) (string, error) {
	buf := make([]byte, 512)
	for {
		n, err := unix.Readlink(path, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", pathErr("readlink", path, err)
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

func (realSys) readDir(path string) ([]dirEntry, error) {
	ents, err := os.ReadDir(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, pathErr("readdir", path, err)
	}
	out := make([]dirEntry, len(ents))
	for i, e := range ents {
		t := e.Type()
		out[i] = dirEntry{name: e.Name(), dir: t.IsDir(), link: t&os.ModeSymlink != 0}
	}
	return out, nil
}

func (realSys) readAttr(path string) (string, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return "", pathErr("open", path, err)
	}
	defer unix.Close(fd)
	// A configfs attribute is at most one page; one read normally
	// returns all of it, the loop is for the rule, not the case.
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", pathErr("read", path, err)
		}
		if n == 0 {
			return string(out), nil
		}
		out = append(out, buf[:n]...)
	}
}

func (realSys) writeAttr(path, value string) error {
	fd, err := openRetry(path, unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return pathErr("open", path, err)
	}
	// The whole value goes in one write: configfs hands each write(2) to
	// the attribute's store function as a complete value.
	var n int
	err = retry(func() (e error) { n, e = unix.Write(fd, []byte(value)); return e })
	cerr := unix.Close(fd)
	switch {
	case err != nil:
		return pathErr("write", path, err)
	case n != len(value):
		return pathErr("write", path, unix.EIO)
	case cerr != nil:
		return pathErr("close", path, cerr)
	}
	return nil
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func retry(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
