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
// attribute (regular file) or a link.
type dirEntry struct {
	name string
	dir  bool
	link bool
}

func pathErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Path: path, Err: err}
}
