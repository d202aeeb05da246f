package configfs

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// kernelSim models, on a temporary directory, the few nvmet configfs rules
// the package relies on, so that Apply and Remove can be unit tested quickly.
// It is a model, not a proof: every rule here was observed on Linux 6.1
// (Debian 6.1.0-57) and is exercised against the real kernel by the suite in
// kerneltest/ (build tag "kernel"). Defaults follow Debian's configuration:
// no passthru/ group, no DH-HMAC-CHAP host attributes.
//
// Modelled: mkdir creating default attributes and groups; rmdir removing them
// and refusing with EPERM (default groups), ENOTEMPTY (user children) and
// EBUSY (link targets); symlink targets resolved as absolute paths and shown
// relative, as configfs does; allow_link checks (allowed_hosts vs
// allow_any_host, duplicates, port enable on first link); EBUSY/EINVAL/EACCES
// from attribute stores on enabled namespaces and ports; cntlid ordering.
type kernelSim struct {
	t    *testing.T
	root string // the configfs mount point
	real realSys

	mu     sync.Mutex                  // configfs serializes per directory; one lock is enough here
	ops    []string                    // mutating operations, "op path"
	failAt func(op, path string) error // fault injection: a non-nil errno fails the operation
}

func newKernelSim(t *testing.T) (*kernelSim, *FS) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"nvmet", "nvmet/subsystems", "nvmet/ports", "nvmet/hosts"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	k := &kernelSim{t: t, root: root}
	return k, newFS(root, k)
}

// mutations returns and clears the mutating operations seen so far.
func (k *kernelSim) mutations() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ops := k.ops
	k.ops = nil
	return ops
}

// record notes a mutating operation, or fails it when failAt says so.
func (k *kernelSim) record(op, path, value string) error {
	if k.failAt != nil {
		if err := k.failAt(op, path); err != nil {
			return &Error{Op: op, Path: path, Err: err}
		}
	}
	s := op + " " + strings.TrimPrefix(path, k.root+"/nvmet/")
	if op == "write" {
		s += "=" + value
	}
	k.ops = append(k.ops, s)
	return nil
}

// kind classifies a path under nvmet: "subsystem", "namespace", "port",
// "host", "referral", "anagroup", "allowed_hosts-link", "port-link",
// "default" for kernel-made groups, or "" for anything else.
func (k *kernelSim) kind(path string) (string, []string) {
	rel, err := filepath.Rel(filepath.Join(k.root, "nvmet"), path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", nil
	}
	p := strings.Split(rel, "/")
	switch {
	case len(p) == 1:
		return "default", p
	case len(p) == 2:
		return map[string]string{"subsystems": "subsystem", "ports": "port", "hosts": "host"}[p[0]], p
	case len(p) == 3 && p[0] == "subsystems" && (p[2] == "namespaces" || p[2] == "allowed_hosts" || p[2] == "passthru"),
		len(p) == 3 && p[0] == "ports" && (p[2] == "subsystems" || p[2] == "referrals" || p[2] == "ana_groups"),
		len(p) == 4 && p[0] == "ports" && p[2] == "ana_groups" && p[3] == "1":
		return "default", p
	case len(p) == 4 && p[0] == "subsystems" && p[2] == "namespaces":
		return "namespace", p
	case len(p) == 4 && p[0] == "subsystems" && p[2] == "allowed_hosts":
		return "allowed_hosts-link", p
	case len(p) == 4 && p[0] == "ports" && p[2] == "subsystems":
		return "port-link", p
	case len(p) == 4 && p[0] == "ports" && p[2] == "referrals":
		return "referral", p
	case len(p) == 4 && p[0] == "ports" && p[2] == "ana_groups":
		return "anagroup", p
	}
	return "", p
}

func (k *kernelSim) nvmet(parts ...string) string {
	return filepath.Join(append([]string{k.root, "nvmet"}, parts...)...)
}

func (k *kernelSim) writeFiles(dir string, files map[string]string) {
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			k.t.Fatal(err)
		}
	}
}

func (k *kernelSim) mkdir(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	kind, p := k.kind(path)
	if _, err := os.Lstat(filepath.Dir(path)); err != nil {
		return &Error{Op: "mkdir", Path: path, Err: syscall.ENOENT}
	}
	if _, err := os.Lstat(path); err == nil {
		return &Error{Op: "mkdir", Path: path, Err: syscall.EEXIST}
	}
	switch kind {
	case "subsystem":
		if p[1] == DiscoveryNQN {
			return &Error{Op: "mkdir", Path: path, Err: syscall.EINVAL}
		}
	case "namespace":
		n, err := parseID(p[3], 32)
		if err != nil || n == 0 || n == nsidAll {
			return &Error{Op: "mkdir", Path: path, Err: syscall.EINVAL}
		}
	case "port":
		if _, err := parseID(p[1], 16); err != nil {
			return &Error{Op: "mkdir", Path: path, Err: syscall.EINVAL}
		}
	case "host", "referral", "anagroup":
	default:
		return &Error{Op: "mkdir", Path: path, Err: syscall.EPERM}
	}
	if err := k.record("mkdir", path, ""); err != nil {
		return err
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		k.t.Fatal(err)
	}
	switch kind {
	case "subsystem":
		k.writeFiles(path, map[string]string{
			"attr_allow_any_host": "0", "attr_version": "1.3",
			"attr_serial": fmt.Sprintf("%020x", len(p[1])*7919), "attr_model": "Linux",
			"attr_cntlid_min": "1", "attr_cntlid_max": "65519", "attr_qid_max": "128",
			"attr_pi_enable": "0",
		})
		// Debian's 6.1 has no CONFIG_NVME_TARGET_PASSTHRU, so no
		// passthru/ group.
		for _, d := range []string{"namespaces", "allowed_hosts"} {
			os.Mkdir(filepath.Join(path, d), 0o755)
		}
	case "namespace":
		// 6.1 stable kernels give a new namespace a random UUID.
		var u [16]byte
		rand.Read(u[:])
		k.writeFiles(path, map[string]string{
			"device_path": "(null)", "device_uuid": formatUUIDBytes(u), "device_nguid": zeroUUID,
			"ana_grpid": "1", "enable": "0", "buffered_io": "0", "revalidate_size": "",
		})
	case "port":
		k.writeFiles(path, map[string]string{
			"addr_adrfam": "", "addr_treq": "not specified", "addr_traddr": "",
			"addr_trsvcid": "", "addr_trtype": "", "param_inline_data_size": "-1",
			"param_pi_enable": "0",
		})
		for _, d := range []string{"subsystems", "referrals", "ana_groups", "ana_groups/1"} {
			os.Mkdir(filepath.Join(path, d), 0o755)
		}
		k.writeFiles(filepath.Join(path, "ana_groups/1"), map[string]string{"ana_state": "optimized"})
	case "host":
		// Without CONFIG_NVME_TARGET_AUTH (Debian's 6.1) a host has no
		// attributes.
	}
	return nil
}

// linkTargets counts, for every object under nvmet, the links pointing at it.
func (k *kernelSim) linkTargets() map[string]int {
	n := map[string]int{}
	filepath.Walk(k.nvmet(), func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode()&os.ModeSymlink != 0 {
			t, _ := os.Readlink(path)
			n[filepath.Clean(filepath.Join(filepath.Dir(path), t))]++
		}
		return nil
	})
	return n
}

func (k *kernelSim) children(dir string, wantDirs bool) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if e.Type()&os.ModeSymlink != 0 || (wantDirs && e.IsDir()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func (k *kernelSim) rmdir(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	kind, _ := k.kind(path)
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return &Error{Op: "rmdir", Path: path, Err: syscall.ENOENT}
	case !fi.IsDir():
		return &Error{Op: "rmdir", Path: path, Err: syscall.ENOTDIR}
	case kind == "default" || kind == "":
		return &Error{Op: "rmdir", Path: path, Err: syscall.EPERM}
	case k.linkTargets()[path] > 0:
		return &Error{Op: "rmdir", Path: path, Err: syscall.EBUSY}
	}
	busy := false
	switch kind {
	case "subsystem":
		busy = len(k.children(filepath.Join(path, "namespaces"), true)) > 0 ||
			len(k.children(filepath.Join(path, "allowed_hosts"), true)) > 0
	case "port":
		busy = len(k.children(filepath.Join(path, "subsystems"), true)) > 0 ||
			len(k.children(filepath.Join(path, "referrals"), true)) > 0 ||
			len(k.children(filepath.Join(path, "ana_groups"), true)) > 1
	}
	if busy {
		return &Error{Op: "rmdir", Path: path, Err: syscall.ENOTEMPTY}
	}
	if err := k.record("rmdir", path, ""); err != nil {
		return err
	}
	return os.RemoveAll(path)
}

func (k *kernelSim) symlink(target, link string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	kind, p := k.kind(link)
	if kind != "allowed_hosts-link" && kind != "port-link" {
		return &Error{Op: "symlink", Path: link, Err: syscall.EPERM}
	}
	if !filepath.IsAbs(target) {
		// configfs resolves the target against the caller's working
		// directory, which is never the link's directory here.
		return &Error{Op: "symlink", Path: link, Err: syscall.ENOENT}
	}
	if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
		return &Error{Op: "symlink", Path: link, Err: syscall.ENOENT}
	}
	tkind, tp := k.kind(target)
	if _, err := os.Lstat(link); err == nil {
		return &Error{Op: "symlink", Path: link, Err: syscall.EEXIST}
	}
	dir := filepath.Dir(link)
	for _, name := range k.children(dir, false) {
		t, _ := os.Readlink(filepath.Join(dir, name))
		if filepath.Clean(filepath.Join(dir, t)) == filepath.Clean(target) {
			return &Error{Op: "symlink", Path: link, Err: syscall.EEXIST}
		}
	}
	switch kind {
	case "allowed_hosts-link":
		if tkind != "host" {
			return &Error{Op: "symlink", Path: link, Err: syscall.EINVAL}
		}
		if k.attr(k.nvmet("subsystems", p[1], "attr_allow_any_host")) == "1" {
			return &Error{Op: "symlink", Path: link, Err: syscall.EINVAL}
		}
	case "port-link":
		if tkind != "subsystem" {
			return &Error{Op: "symlink", Path: link, Err: syscall.EINVAL}
		}
		if len(k.children(dir, false)) == 0 {
			if err := k.enablePort(p[1]); err != nil {
				return &Error{Op: "symlink", Path: link, Err: err}
			}
		}
	}
	if err := k.record("symlink", link, ""); err != nil {
		return err
	}
	// configfs shows the link relative to the link's directory, through
	// the nvmet root: four levels up from any nvmet link directory.
	rel := "../../../../nvmet/" + tp[0] + "/" + tp[1]
	return os.Symlink(rel, link)
}

// enablePort models nvmet_enable_port for tcp: the address must be complete
// and no other enabled port may listen on it.
func (k *kernelSim) enablePort(id string) error {
	a := func(id, name string) string { return k.attr(k.nvmet("ports", id, name)) }
	if a(id, "addr_trtype") != "tcp" && a(id, "addr_trtype") != "loop" {
		return syscall.EINVAL
	}
	if a(id, "addr_trtype") == "tcp" {
		if (a(id, "addr_adrfam") != "ipv4" && a(id, "addr_adrfam") != "ipv6") || a(id, "addr_traddr") == "" {
			return syscall.EINVAL
		}
		others, _ := os.ReadDir(k.nvmet("ports"))
		for _, o := range others {
			if o.Name() != id && len(k.children(k.nvmet("ports", o.Name(), "subsystems"), false)) > 0 &&
				a(o.Name(), "addr_traddr") == a(id, "addr_traddr") && a(o.Name(), "addr_trsvcid") == a(id, "addr_trsvcid") {
				return syscall.EADDRINUSE
			}
		}
	}
	return nil
}

func (k *kernelSim) unlink(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	fi, err := os.Lstat(path)
	if err != nil {
		return &Error{Op: "unlink", Path: path, Err: syscall.ENOENT}
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		return &Error{Op: "unlink", Path: path, Err: syscall.EPERM}
	}
	if err := k.record("unlink", path, ""); err != nil {
		return err
	}
	return os.Remove(path)
}

func (k *kernelSim) readlink(path string) (string, error) { return k.real.readlink(path) }

func (k *kernelSim) readDir(path string) ([]dirEntry, error) { return k.real.readDir(path) }

func (k *kernelSim) readAttr(path string) (string, error) { return k.real.readAttr(path) }

func (k *kernelSim) attr(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSuffix(string(b), "\n")
}

func (k *kernelSim) writeAttr(path, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return &Error{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	kind, p := k.kind(filepath.Dir(path))
	name := filepath.Base(path)
	v := strings.TrimSuffix(value, "\n")
	fail := func(errno syscall.Errno) error { return &Error{Op: "write", Path: path, Err: errno} }
	if value == "" {
		// configfs refuses an empty write before the store sees it.
		return fail(syscall.EFAULT)
	}
	switch kind {
	case "namespace":
		enabled := k.attr(filepath.Join(filepath.Dir(path), "enable")) == "1"
		switch name {
		case "device_path", "device_uuid", "device_nguid":
			if enabled {
				return fail(syscall.EBUSY)
			}
		case "buffered_io":
			if enabled {
				return fail(syscall.EINVAL)
			}
		case "revalidate_size":
			if !enabled {
				return fail(syscall.EINVAL)
			}
		}
		switch name {
		case "device_path":
			if v == "" {
				return fail(syscall.EINVAL)
			}
		case "device_uuid":
			u, err := parseUUID(v)
			if err != nil {
				return fail(syscall.EINVAL)
			}
			v = u
		case "device_nguid":
			g, err := parseNGUID(v)
			if err != nil {
				return fail(syscall.EINVAL)
			}
			v = g
		case "ana_grpid":
			n, err := strconv.ParseUint(v, 0, 32)
			if err != nil || n < 1 || n > maxANAGroupID {
				return fail(syscall.EINVAL)
			}
		case "enable":
			if v == "1" && !enabled {
				dp := k.attr(filepath.Join(filepath.Dir(path), "device_path"))
				if dp == "(null)" {
					return fail(syscall.EINVAL)
				}
				if _, err := os.Stat(dp); err != nil {
					return fail(syscall.ENOENT)
				}
			}
		}
	case "subsystem":
		dir := filepath.Dir(path)
		switch name {
		case "attr_allow_any_host":
			if v != "0" && v != "1" {
				return fail(syscall.EINVAL)
			}
			if v == "1" && len(k.children(filepath.Join(dir, "allowed_hosts"), false)) > 0 {
				return fail(syscall.EINVAL)
			}
		case "attr_serial":
			if err := checkPrintable("", v, maxSerialLen); err != nil {
				return fail(syscall.EINVAL)
			}
			v = fmt.Sprintf("%-20s", v)
		case "attr_version":
			if _, err := parseVersion(v); err != nil {
				return fail(syscall.EINVAL)
			}
		case "attr_cntlid_min", "attr_cntlid_max":
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n == 0 {
				return fail(syscall.EINVAL)
			}
			lo, _ := strconv.ParseUint(k.attr(filepath.Join(dir, "attr_cntlid_min")), 10, 16)
			hi, _ := strconv.ParseUint(k.attr(filepath.Join(dir, "attr_cntlid_max")), 10, 16)
			if (name == "attr_cntlid_min" && n >= hi) || (name == "attr_cntlid_max" && n <= lo) {
				return fail(syscall.EINVAL)
			}
		}
	case "port":
		if len(k.children(k.nvmet("ports", p[1], "subsystems"), false)) > 0 {
			return fail(syscall.EACCES)
		}
		switch name {
		case "addr_trtype":
			if !slices.Contains(trTypes, v) {
				return fail(syscall.EINVAL)
			}
		case "addr_adrfam":
			if !slices.Contains(adrFams, v) {
				return fail(syscall.EINVAL)
			}
		}
	}
	if err := k.record("write", path, v); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(v+"\n"), 0o644)
}
