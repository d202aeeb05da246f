package configfs

import (
	"bytes"
	"encoding/binary"
	"time"

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

// noFollow is in the flags of every open. configfs groups and attributes
// are never symlinks, and the links configfs has (allowed_hosts, a port's
// subsystems) are only ever read with readlink; so a symlink where a group
// or an attribute belongs is not configfs, and following it could read
// anything on the machine (the open fails instead: ELOOP, or ENOTDIR with
// O_DIRECTORY). O_NONBLOCK, which configfs ignores, keeps a named pipe in a
// fixture tree from blocking the open.
const noFollow = unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

// readDir lists a directory with getdents64 on a raw descriptor; configfs
// fills in d_type, so no entry needs a stat.
func (realSys) readDir(path string) ([]dirEntry, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_DIRECTORY|noFollow)
	if err != nil {
		return nil, pathErr("open", path, err)
	}
	defer unix.Close(fd)
	var out []dirEntry
	var unknown []int
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, pathErr("readdir", path, err)
		}
		if n <= 0 {
			fillUnknownTypes(path, out, unknown)
			return out, nil
		}
		out, unknown = parseDirents(buf[:n], out, unknown)
	}
}

// fillUnknownTypes stats the entries whose d_type the filesystem left
// DT_UNKNOWN (configfs never does; a fixture tree on another filesystem may).
func fillUnknownTypes(dir string, ents []dirEntry, unknown []int) {
	for _, i := range unknown {
		var st unix.Stat_t
		if unix.Lstat(dir+"/"+ents[i].name, &st) == nil {
			ents[i].dir = st.Mode&unix.S_IFMT == unix.S_IFDIR
			ents[i].file = st.Mode&unix.S_IFMT == unix.S_IFREG
			ents[i].link = st.Mode&unix.S_IFMT == unix.S_IFLNK
		}
	}
}

// parseDirents decodes struct linux_dirent64 records: d_ino (8 bytes),
// d_off (8), d_reclen (2), d_type (1), then the NUL-terminated name.
func parseDirents(b []byte, out []dirEntry, unknown []int) ([]dirEntry, []int) {
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			break
		}
		typ, name := b[18], b[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		b = b[reclen:]
		if s := string(name); s != "." && s != ".." {
			if typ == unix.DT_UNKNOWN {
				unknown = append(unknown, len(out))
			}
			out = append(out, dirEntry{name: s, dir: typ == unix.DT_DIR, file: typ == unix.DT_REG, link: typ == unix.DT_LNK})
		}
	}
	return out, unknown
}

func (realSys) readAttr(path string) (string, error) {
	fd, err := openRetry(path, unix.O_RDONLY|noFollow)
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
		if len(out)+n > maxAttrRead {
			return "", pathErr("read", path, unix.EFBIG)
		}
		out = append(out, buf[:n]...)
	}
}

func (realSys) writeAttr(path, value string) error {
	fd, err := openRetry(path, unix.O_WRONLY|noFollow)
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

// errRestartSys is ERESTARTSYS, an errno the kernel means for itself that
// reaches user space when a driver returns it with no signal pending. A
// zvol's open does so when the pool's namespace lock stays contended
// (openzfs/zfs#12301, Linux 5.13 and later), and nvmet opens the backing
// device in the write of a namespace's enable: under a burst of zfs
// creates that write failed with "errno 512". It is worth another try.
const errRestartSys = unix.Errno(512)

// Another try of a write that failed with errRestartSys waits restartDelay,
// doubled for each, up to restartMaxDelay, at most maxRestarts times: ZFS
// has already waited for its lock (zfs_vdev_open_timeout_ms) each time.
const (
	maxRestarts     = 10
	restartDelay    = 10 * time.Millisecond
	restartMaxDelay = 500 * time.Millisecond
)

// retry runs f again while it fails with EINTR, and up to maxRestarts
// times, after a pause, while it fails with errRestartSys.
func retry(f func() error) error {
	delay := restartDelay
	for restarts := 0; ; {
		err := f()
		switch {
		case err == unix.EINTR:
			continue
		case err == errRestartSys && restarts < maxRestarts:
			restarts++
			sleep(delay)
			delay = min(2*delay, restartMaxDelay)
			continue
		}
		return err
	}
}

// sleep is time.Sleep, replaced by tests.
var sleep = time.Sleep
