package kernelvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Lab is a provisioned kernel lab: a kernel and an initramfs ready to boot,
// and the versions they were made from.
type Lab struct {
	CacheDir      string
	KernelRelease string // uname -r of the guest, e.g. 6.1.0-57-amd64
	KernelVersion string // the Debian package version, e.g. 6.1.192-3
	ZFSVersion    string // zfsutils-linux and zfs-dkms version
	Kernel        string // path of the guest's vmlinuz
	Initramfs     string // path of the guest's initramfs
	QEMU          string // path of qemu-system-x86_64
	// ModuleTree is the guest kernel's whole module tree (with the ZFS
	// modules and a modules.dep of its own) on the host. Boot names it on
	// the guest's kernel command line (guest.ModuleTreeParam) for guests
	// that need more than the initramfs's subset, such as the lab cluster.
	ModuleTree string
}

type provisioner struct {
	cfg Config
	cmd *commander
	apt *apt
}

// Provision makes the host ready to boot the lab, idempotently: it installs
// the host packages, downloads and unpacks the pinned Debian kernel, builds
// the ZFS modules for it from zfs-dkms, and builds the initramfs. Each
// product is cached under cfg.CacheDir keyed by the versions it was made
// from, so a warm call only checks and takes seconds. It needs root.
func Provision(ctx context.Context, cfg Config) (*Lab, error) {
	cfg = cfg.withDefaults()
	if os.Geteuid() != 0 {
		return nil, &Error{Op: "provision", Err: errors.New("the kernel lab needs root (apt-get, and 9p sharing of the host root)")}
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return nil, &Error{Op: "provision: create cache", Path: cfg.CacheDir, Err: err}
	}
	unlock, err := lockDir(ctx, cfg.CacheDir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	cmd := &commander{log: cfg.Log}
	p := &provisioner{cfg: cfg, cmd: cmd, apt: &apt{cmd: cmd, cfg: cfg}}
	start := time.Now()
	var phases []string
	mark := time.Now()
	phase := func(name string) {
		phases = append(phases, fmt.Sprintf("%s %.1fs", name, time.Since(mark).Seconds()))
		mark = time.Now()
	}

	miss, err := p.apt.missing(ctx, HostPackages)
	if err != nil {
		return nil, err
	}
	if err := p.apt.install(ctx, miss); err != nil {
		return nil, err
	}
	phase("packages")
	zfsVer, err := p.apt.installedVersion(ctx, "zfsutils-linux")
	if err != nil {
		return nil, err
	}
	k, err := p.kernel(ctx)
	if err != nil {
		return nil, err
	}
	phase("kernel")
	zfsDir, err := p.zfsModules(ctx, k, zfsVer)
	if err != nil {
		return nil, err
	}
	if err := p.installZFS(ctx, k, zfsDir); err != nil {
		return nil, err
	}
	phase("zfs")
	initrd, err := p.initramfs(ctx, k, zfsDir)
	if err != nil {
		return nil, err
	}
	if err := checkClusterModules(k); err != nil {
		return nil, err
	}
	phase("initramfs")
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, &Error{Op: "provision: find qemu", Err: err}
	}
	lab := &Lab{
		CacheDir:      cfg.CacheDir,
		KernelRelease: k.release,
		KernelVersion: k.version,
		ZFSVersion:    zfsVer,
		Kernel:        k.vmlinuz(),
		Initramfs:     initrd,
		QEMU:          qemu,
		ModuleTree:    k.modDir(),
	}
	fmt.Fprintf(cfg.Log, "pillar-lab: provisioned kernel %s (%s), ZFS %s in %.1fs (%s)\n",
		lab.KernelRelease, lab.KernelVersion, lab.ZFSVersion, time.Since(start).Seconds(), strings.Join(phases, ", "))
	return lab, nil
}

// lockDir takes an exclusive flock on dir/.lock so that two labs
// provisioning at once do not build into the same paths. Booting needs no
// lock: every run has its own directory.
func lockDir(ctx context.Context, dir string) (func(), error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, &Error{Op: "provision: lock cache", Path: path, Err: err}
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, &Error{Op: "provision: lock cache", Path: path, Err: err}
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, &Error{Op: "provision: lock cache (another pillar-lab is provisioning)", Path: path, Err: ctx.Err()}
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// kernelTree is an unpacked Debian kernel image package.
type kernelTree struct {
	release string // 6.1.0-57-amd64
	version string // 6.1.192-3
	root    string // dpkg-deb -x target
}

func (k kernelTree) vmlinuz() string { return filepath.Join(k.root, "boot", "vmlinuz-"+k.release) }
func (k kernelTree) modDir() string  { return filepath.Join(k.root, "lib", "modules", k.release) }

// abi returns "6.1.0-57" of "6.1.0-57-amd64".
func (k kernelTree) abi() string { return strings.TrimSuffix(k.release, "-amd64") }

// cachedKernel returns the unpacked kernel for release if a previous run
// completed it. The version file is written last, so its presence means
// the tree is whole.
func (p *provisioner) cachedKernel(release string) (kernelTree, bool) {
	dir := filepath.Join(p.cfg.CacheDir, "kernel", release)
	v, err := os.ReadFile(filepath.Join(dir, "version"))
	if err != nil {
		return kernelTree{}, false
	}
	return kernelTree{release: release, version: strings.TrimSpace(string(v)), root: filepath.Join(dir, "root")}, true
}

// kernel returns the guest kernel, downloading and unpacking it if needed.
func (p *provisioner) kernel(ctx context.Context) (kernelTree, error) {
	release := p.cfg.KernelABI + "-amd64"
	if k, ok := p.cachedKernel(release); ok {
		return k, nil
	}
	if err := p.apt.update(ctx); err != nil {
		return kernelTree{}, err
	}
	pkg := "linux-image-" + release
	ver, err := p.apt.candidate(ctx, pkg)
	if err != nil {
		return kernelTree{}, err
	}
	if ver == "" {
		if p.cfg.KernelExplicit {
			return kernelTree{}, &Error{Op: "provision: resolve kernel", Path: pkg,
				Err: errors.New("not in the Debian archive (it keeps only the current 6.1.0-NN ABI); pick the current one or drop the explicit kernel")}
		}
		deps, err := p.apt.depends(ctx, "linux-image-amd64", "")
		if err != nil {
			return kernelTree{}, err
		}
		var cur string
		for _, d := range deps {
			if strings.HasPrefix(d, "linux-image-") && strings.HasSuffix(d, "-amd64") {
				cur = strings.TrimPrefix(d, "linux-image-")
			}
		}
		if cur == "" {
			return kernelTree{}, &Error{Op: "provision: resolve kernel", Path: "linux-image-amd64", Err: fmt.Errorf("metapackage names no linux-image-*-amd64 (depends: %v)", deps)}
		}
		fmt.Fprintf(p.cfg.Log, "\n"+
			"pillar-lab: WARNING: ******************************************************\n"+
			"pillar-lab: WARNING: the pinned kernel %s is gone from Debian's archive;\n"+
			"pillar-lab: WARNING: booting the current one, %s, instead.\n"+
			"pillar-lab: WARNING: bump DefaultKernelABI in tests/kernelvm/config.go.\n"+
			"pillar-lab: WARNING: ******************************************************\n\n",
			release, cur)
		release = cur
		if k, ok := p.cachedKernel(release); ok {
			return k, nil
		}
		pkg = "linux-image-" + release
		if ver, err = p.apt.candidate(ctx, pkg); err != nil {
			return kernelTree{}, err
		}
		if ver == "" {
			return kernelTree{}, &Error{Op: "provision: resolve kernel", Path: pkg, Err: errors.New("named by linux-image-amd64 but not downloadable")}
		}
	}

	dir := filepath.Join(p.cfg.CacheDir, "kernel", release)
	if err := os.RemoveAll(dir); err != nil {
		return kernelTree{}, &Error{Op: "provision: clean kernel cache", Path: dir, Err: err}
	}
	deb, err := p.apt.download(ctx, filepath.Join(p.cfg.CacheDir, "downloads"), pkg, ver)
	if err != nil {
		return kernelTree{}, err
	}
	k := kernelTree{release: release, version: ver, root: filepath.Join(dir, "root")}
	fmt.Fprintf(p.cfg.Log, "pillar-lab: provision: unpacking %s\n", filepath.Base(deb))
	if err := p.apt.extract(ctx, deb, k.root); err != nil {
		return kernelTree{}, err
	}
	for _, f := range []string{k.vmlinuz(), filepath.Join(k.modDir(), "modules.builtin")} {
		if _, err := os.Stat(f); err != nil {
			return kernelTree{}, &Error{Op: "provision: check kernel package", Path: pkg, Err: err}
		}
	}
	os.Remove(deb)
	if err := os.WriteFile(filepath.Join(dir, "version"), []byte(ver+"\n"), 0o644); err != nil {
		return kernelTree{}, &Error{Op: "provision: record kernel", Path: dir, Err: err}
	}
	return k, nil
}
