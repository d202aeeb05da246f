//go:build unix

package tlsconfig

import (
	"io/fs"
	"syscall"
)

// inode identifies the file behind a path. A rotation that renames a new
// file into place, or that swaps the `..data` symlink of a kubelet Secret
// volume, always changes it, even when size and mtime happen to match.
func inode(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		// The conversions matter on GOOSes whose Dev or Ino are narrower.
		return uint64(st.Dev), uint64(st.Ino)
	}
	return 0, 0
}
