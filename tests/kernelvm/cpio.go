package kernelvm

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks into its
// initial rootfs (Documentation/driver-api/early-userspace/buffer-format).
// The lab writes the archive itself instead of running cpio so that it can
// add device nodes without mknod and so that the same inputs give the same
// bytes (all times are zero).
type cpioWriter struct {
	w   io.Writer
	n   int64
	ino uint32
	err error
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(b)
	c.n += int64(n)
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// header writes one entry header; mode carries the file type bits
// (syscall.S_IFREG etc.), rdev the device numbers of a node.
func (c *cpioWriter) header(name string, mode uint32, size int64, rdevMajor, rdevMinor uint32) {
	c.ino++
	nlink := uint32(1)
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize, check
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
}

func (c *cpioWriter) dir(name string, perm uint32) {
	c.header(name, syscall.S_IFDIR|perm, 0, 0, 0)
}

func (c *cpioWriter) charDev(name string, perm, major, minor uint32) {
	c.header(name, syscall.S_IFCHR|perm, 0, major, minor)
}

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.header(name, syscall.S_IFREG|perm, int64(len(data)), 0, 0)
	c.write(data)
	c.pad()
}

func (c *cpioWriter) symlink(name, target string) {
	c.header(name, syscall.S_IFLNK|0o777, int64(len(target)), 0, 0)
	c.write([]byte(target))
	c.pad()
}

// tree adds every file under root, in sorted order, with paths relative to
// root.
func (c *cpioWriter) tree(root string) error {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel := strings.TrimPrefix(p, root+"/")
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		perm := uint32(fi.Mode().Perm())
		switch {
		case fi.IsDir():
			c.dir(rel, perm)
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.symlink(rel, t)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			c.file(rel, perm, b)
		default:
			return fmt.Errorf("%s: unsupported file type %v", p, fi.Mode().Type())
		}
	}
	return c.err
}

func (c *cpioWriter) close() error {
	c.header("TRAILER!!!", 0, 0, 0, 0)
	return c.err
}
