//go:build !unix

package tlsconfig

import "io/fs"

// inode is not available here; size, mtime and the periodic content check
// still catch a rotation.
func inode(fs.FileInfo) (dev, ino uint64) { return 0, 0 }
