package configfs

import (
	"path/filepath"
	"sync"
)

// DefaultRoot is where configfs is mounted on every mainstream distribution.
const DefaultRoot = "/sys/kernel/config"

// FS is an nvmet configfs tree under a configfs mount point. Its methods are
// safe for concurrent use; see the package documentation for what FS assumes
// about writers in other processes.
type FS struct {
	root  string // the configfs mount point
	nvmet string // root/nvmet
	sys   sysOps

	// Keyed locks serialize work on one object while letting work on
	// other objects run: one per subsystem NQN, one per port address and
	// one per host NQN.
	subsystems keyedMutex
	ports      keyedMutex
	hosts      keyedMutex
	// portAlloc serializes choosing and creating a new port directory, so
	// that two Applies for different addresses never race for one ID.
	portAlloc sync.Mutex
}

// NewFS returns an FS for the configfs mounted at root ("" means
// DefaultRoot). It does not touch the filesystem: a missing nvmet directory
// (nvmet not loaded) surfaces as an IsNotExist error from every call that
// reads or writes the tree (Read, ReadSubsystem, ReadExport, Apply, Remove),
// including those that would otherwise report a subsystem as absent.
func NewFS(root string) *FS {
	return newFS(root, realSys{})
}

func newFS(root string, sys sysOps) *FS {
	if root == "" {
		root = DefaultRoot
	}
	root = filepath.Clean(root)
	return &FS{root: root, nvmet: filepath.Join(root, "nvmet"), sys: sys}
}

// Root returns the configfs mount point this FS works under.
func (f *FS) Root() string { return f.root }

// Paths. Names reaching these were validated (Apply, Remove) or came from a
// directory listing (Read), so they are single path elements.

func (f *FS) subsystemsDir() string          { return f.nvmet + "/subsystems" }
func (f *FS) portsDir() string               { return f.nvmet + "/ports" }
func (f *FS) hostsDir() string               { return f.nvmet + "/hosts" }
func (f *FS) subsystemDir(nqn string) string { return f.nvmet + "/subsystems/" + nqn }
func (f *FS) hostDir(nqn string) string      { return f.nvmet + "/hosts/" + nqn }
func (f *FS) portDir(name string) string     { return f.nvmet + "/ports/" + name }

// namespaceDir is the directory of a namespace; name is its directory
// name, which is the decimal NSID for namespaces Apply makes.
func (f *FS) namespaceDir(nqn, name string) string {
	return f.subsystemDir(nqn) + "/namespaces/" + name
}

func (f *FS) allowedHostLink(nqn, host string) string {
	return f.subsystemDir(nqn) + "/allowed_hosts/" + host
}

func (f *FS) portSubsystemLink(port, nqn string) string {
	return f.portDir(port) + "/subsystems/" + nqn
}

func uitoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}

// keyedMutex is a set of mutexes created on demand and dropped when unused.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()

	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
