package kernelvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// zfsKey names one ZFS module build: the module source version and the
// exact kernel it was built against (Module.symvers changes with the
// package version, not only with the ABI).
func zfsKey(zfsVer string, k kernelTree) string {
	return sanitize(zfsVer) + "_" + k.release + "_" + sanitize(k.version)
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}

// zfsModules returns a directory of stripped ZFS .ko files built for k,
// building them from Debian's zfs-dkms source if the cache lacks them.
// The build never runs DKMS or loads anything on the host: the host kernel
// is not the guest kernel, and cannot load modules at all.
func (p *provisioner) zfsModules(ctx context.Context, k kernelTree, zfsVer string) (string, error) {
	key := zfsKey(zfsVer, k)
	dir := filepath.Join(p.cfg.CacheDir, "zfs", key)
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return dir, nil
	}
	const op = "provision: build ZFS modules"
	hdr, err := p.headers(ctx, k)
	if err != nil {
		return "", err
	}
	build := filepath.Join(p.cfg.CacheDir, "build", "zfs-"+key)
	if err := os.RemoveAll(build); err != nil {
		return "", &Error{Op: op, Path: build, Err: err}
	}
	deb, err := p.apt.download(ctx, filepath.Join(p.cfg.CacheDir, "downloads"), "zfs-dkms", zfsVer)
	if err != nil {
		return "", err
	}
	if err := p.apt.extract(ctx, deb, build); err != nil {
		return "", err
	}
	srcs, _ := filepath.Glob(filepath.Join(build, "usr", "src", "zfs-*"))
	if len(srcs) != 1 {
		return "", &Error{Op: op, Path: deb, Err: fmt.Errorf("expected one usr/src/zfs-* in zfs-dkms, found %v", srcs)}
	}
	src := srcs[0]
	common := filepath.Join(hdr, "usr", "src", "linux-headers-"+k.abi()+"-common")
	obj := filepath.Join(hdr, "usr", "src", "linux-headers-"+k.release)
	fmt.Fprintf(p.cfg.Log, "pillar-lab: provision: building ZFS %s modules for %s (several minutes on 2 cores)\n", zfsVer, k.release)
	// KCFLAGS=-g0 (kbuild appends it last): the Debian kernel's config
	// builds modules with DWARF, which the strip below throws away, and
	// emitting it is a large share of the compile on 2 cores.
	long := cmdOpts{dir: src, env: []string{"KCFLAGS=-g0"}, timeout: 4 * p.cfg.StepTimeout, stream: true}
	if _, err := p.cmd.run(ctx, op+": configure", long, "./configure", "--with-config=kernel",
		"--with-linux="+common, "--with-linux-obj="+obj); err != nil {
		return "", err
	}
	if _, err := p.cmd.run(ctx, op+": make", long, "make", "-C", "module", "-j"+strconv.Itoa(runtime.NumCPU())); err != nil {
		return "", err
	}
	var kos []string
	err = filepath.WalkDir(filepath.Join(src, "module"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".ko") {
			kos = append(kos, path)
		}
		return err
	})
	if err != nil || len(kos) == 0 {
		return "", &Error{Op: op, Path: src, Err: fmt.Errorf("no .ko files after the build (walk: %v)", err)}
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", &Error{Op: op, Path: tmp, Err: err}
	}
	for _, ko := range kos {
		dst := filepath.Join(tmp, filepath.Base(ko))
		if err := copyFile(ko, dst, 0o644); err != nil {
			return "", &Error{Op: op, Path: dst, Err: err}
		}
		// Without debug info there is little to strip; what is left (a
		// build with other flags) the initramfs does not need either.
		if _, err := p.cmd.run(ctx, op+": strip", cmdOpts{timeout: p.cfg.StepTimeout}, "strip", "--strip-debug", dst); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), []byte(key+"\n"), 0o644); err != nil {
		return "", &Error{Op: op, Path: tmp, Err: err}
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", &Error{Op: op, Path: dir, Err: err}
	}
	os.RemoveAll(build)
	os.Remove(deb)
	return dir, nil
}

// headers unpacks the kernel headers for k (the arch package, the common
// package and kbuild) into the cache rather than installing them: the host
// gets no /usr/src trees for a kernel it does not run.
func (p *provisioner) headers(ctx context.Context, k kernelTree) (string, error) {
	const op = "provision: unpack kernel headers"
	dir := filepath.Join(p.cfg.CacheDir, "headers", k.release)
	root := filepath.Join(dir, "root")
	if v, err := os.ReadFile(filepath.Join(dir, "version")); err == nil && strings.TrimSpace(string(v)) == k.version {
		return root, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", &Error{Op: op, Path: dir, Err: err}
	}
	pkg := "linux-headers-" + k.release
	deps, err := p.apt.depends(ctx, pkg, k.version)
	if err != nil {
		return "", err
	}
	pkgs := []string{pkg}
	for _, d := range deps {
		// linux-headers-*-common and linux-kbuild-*; the compiler package
		// (linux-compiler-gcc-12-x86) is gcc-12, a host package.
		if strings.HasPrefix(d, "linux-headers-") || strings.HasPrefix(d, "linux-kbuild-") {
			pkgs = append(pkgs, d)
		}
	}
	if len(pkgs) != 3 {
		return "", &Error{Op: op, Path: pkg, Err: fmt.Errorf("expected headers, common headers and kbuild, got %v", pkgs)}
	}
	for _, name := range pkgs {
		deb, err := p.apt.download(ctx, filepath.Join(p.cfg.CacheDir, "downloads"), name, k.version)
		if err != nil {
			return "", err
		}
		if err := p.apt.extract(ctx, deb, root); err != nil {
			return "", err
		}
		os.Remove(deb)
	}
	// The arch Makefile includes the common one by its absolute installed
	// path; point it at our unpacked copy. The scripts/ and tools/ links
	// into kbuild are relative and resolve inside root unchanged.
	mk := filepath.Join(root, "usr", "src", pkg, "Makefile")
	b, err := os.ReadFile(mk)
	if err != nil {
		return "", &Error{Op: op, Path: mk, Err: err}
	}
	b = bytes.ReplaceAll(b, []byte(" /usr/src/"), []byte(" "+filepath.Join(root, "usr", "src")+"/"))
	if err := os.WriteFile(mk, b, 0o644); err != nil {
		return "", &Error{Op: op, Path: mk, Err: err}
	}
	if err := os.WriteFile(filepath.Join(dir, "version"), []byte(k.version+"\n"), 0o644); err != nil {
		return "", &Error{Op: op, Path: dir, Err: err}
	}
	return root, nil
}

// installZFS puts the ZFS modules into the unpacked kernel's module tree
// (extra/zfs, where DKMS would put them) and regenerates modules.dep, so
// that module resolution sees one tree. A marker records which build is
// installed, so a ZFS or kernel update replaces it.
func (p *provisioner) installZFS(ctx context.Context, k kernelTree, zfsDir string) error {
	const op = "provision: install ZFS modules into the guest module tree"
	extra := filepath.Join(k.modDir(), "extra", "zfs")
	marker := filepath.Join(extra, ".pillar-lab-zfs")
	want := filepath.Base(zfsDir)
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == want {
		if _, err := os.Stat(filepath.Join(k.modDir(), "modules.dep")); err == nil {
			return nil
		}
	}
	if err := os.RemoveAll(extra); err != nil {
		return &Error{Op: op, Path: extra, Err: err}
	}
	if err := os.MkdirAll(extra, 0o755); err != nil {
		return &Error{Op: op, Path: extra, Err: err}
	}
	kos, _ := filepath.Glob(filepath.Join(zfsDir, "*.ko"))
	sort.Strings(kos)
	for _, ko := range kos {
		if err := copyFile(ko, filepath.Join(extra, filepath.Base(ko)), 0o644); err != nil {
			return &Error{Op: op, Path: ko, Err: err}
		}
	}
	if _, err := p.cmd.run(ctx, op+": depmod", cmdOpts{timeout: p.cfg.StepTimeout}, "depmod", "-b", k.root, k.release); err != nil {
		return err
	}
	if err := os.WriteFile(marker, []byte(want+"\n"), 0o644); err != nil {
		return &Error{Op: op, Path: marker, Err: err}
	}
	return nil
}

// copyFile copies src to dst, replacing dst.
func copyFile(src, dst string, mode os.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	return nil
}

var errNotFound = errors.New("not found")
