package configfs

// sysOps is the handful of filesystem calls the package makes. Every call
// returns an *Error carrying the operation, the path and the errno. The
// production implementation (sys_linux.go, sys_other.go) issues them
// directly; tests substitute a model of the kernel's configfs rules on a
// temporary directory, because a plain directory cannot reproduce them.
type sysOps interface {
	mkdir(path string) error
	rmdir(path string) error
	symlink(target, link string) error
	unlink(path string) error
	readlink(path string) (string, error)
	readDir(path string) ([]dirEntry, error)
	readAttr(path string) (string, error)
	writeAttr(path, value string) error
}

// dirEntry is one name in a configfs directory: a group (directory), an
// attribute (regular file) or a link. configfs has nothing else; an entry
// of another type (a named pipe or a device node in a fixture tree) is
// none of the three and is never opened.
type dirEntry struct {
	name string
	dir  bool
	file bool
	link bool
}

// maxAttrRead bounds what readAttr returns. A configfs attribute shows at
// most one page (the largest page Linux uses is 64 KiB); a longer file is
// not a configfs attribute, and reading it whole (a sparse file of
// gigabytes in a fixture tree) would only exhaust memory.
const maxAttrRead = 64 << 10

func pathErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Path: path, Err: err}
}
