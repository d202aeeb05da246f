package kernelvm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// HostPackages are the Debian packages the lab installs on the host. The
// guest runs the host's userland (shared read-only over 9p), so every tool
// a real-kernel test calls inside the guest is installed here:
//
//   - qemu-system-x86: the VM (TCG; /dev/kvm on our machines runs no guest).
//   - busybox-static: the initramfs's only binary.
//   - kmod: depmod for the module trees; modprobe inside the guest.
//   - lvm2, thin-provisioning-tools: LVM; thin pools run thin_check when
//     they activate and fail without it.
//   - zfsutils-linux (contrib): zpool and zfs, matching the modules built
//     from zfs-dkms of the same version.
//   - xfsprogs, e2fsprogs, nvme-cli, fio, util-linux: mkfs, the initiator
//     CLI, I/O load, losetup/mount/setsid.
//   - cpio: to inspect the lab's initramfs by hand (the lab writes its own).
//   - gcc-12, make, binutils: the ZFS module build; Debian's kernel
//     headers name gcc-12 as their compiler.
//   - containerd, runc, containernetworking-plugins: the container runtime
//     and the CNI plugins (bridge, host-local, loopback in /usr/lib/cni) of
//     the lab cluster (tests/e2e/cluster), which the guest runs from the
//     host's userland like every other tool. Installing them starts
//     nothing: policy-rc.d forbids it, and the host never runs them.
//   - iptables, conntrack, socat: kube-proxy programs Services with
//     iptables (nft backend) and flushes conntrack entries; the kubelet's
//     port-forward needs socat.
var HostPackages = []string{
	"qemu-system-x86", "busybox-static", "cpio", "kmod",
	"lvm2", "thin-provisioning-tools", "xfsprogs", "e2fsprogs",
	"nvme-cli", "fio", "util-linux", "zfsutils-linux",
	"gcc-12", "make", "binutils",
	"containerd", "runc", "containernetworking-plugins",
	"iptables", "conntrack", "socat",
}

// apt drives apt-get, apt-cache and dpkg for provisioning.
type apt struct {
	cmd     *commander
	cfg     Config
	updated bool // apt-get update ran in this process
}

// missing returns the packages of pkgs that are not installed.
func (a *apt) missing(ctx context.Context, pkgs []string) ([]string, error) {
	// dpkg-query exits 1 when a name is unknown; the output still lists
	// the known ones, so the exit status is not an error here.
	out, _ := a.cmd.run(ctx, "provision: check host packages", cmdOpts{timeout: a.cfg.StepTimeout},
		"dpkg-query", append([]string{"-W", "-f=${Package} ${db:Status-Abbrev}\n"}, pkgs...)...)
	installed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[1] == "ii" {
			installed[strings.SplitN(f[0], ":", 2)[0]] = true
		}
	}
	var miss []string
	for _, p := range pkgs {
		if !installed[p] {
			miss = append(miss, p)
		}
	}
	return miss, nil
}

// installedVersion returns the installed version of pkg.
func (a *apt) installedVersion(ctx context.Context, pkg string) (string, error) {
	out, err := a.cmd.run(ctx, "provision: query installed version", cmdOpts{timeout: a.cfg.StepTimeout},
		"dpkg-query", "-W", "-f=${Version}", pkg)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", &Error{Op: "provision: query installed version", Path: pkg, Err: fmt.Errorf("package is not installed")}
	}
	return v, nil
}

// update runs apt-get update once per process. The package lists on a
// machine image may be months old, and a download of a version they name
// that the archive has since dropped fails, so any step that needs the
// archive refreshes them first.
func (a *apt) update(ctx context.Context) error {
	if a.updated {
		return nil
	}
	if err := a.ensureContrib(); err != nil {
		return err
	}
	fmt.Fprintln(a.cfg.Log, "pillar-lab: provision: apt-get update")
	if _, err := a.cmd.run(ctx, "provision: apt-get update", cmdOpts{timeout: a.cfg.StepTimeout, stream: true},
		"apt-get", "update", "-q"); err != nil {
		return err
	}
	a.updated = true
	return nil
}

// contribSources is the sources file the lab adds when Debian's contrib
// component (zfs-dkms, zfsutils-linux) is not enabled.
const contribSources = "/etc/apt/sources.list.d/pillar-lab-contrib.sources"

// ensureContrib enables Debian's contrib component for every archive that
// the host already uses for main, by writing contribSources. It copies the
// host's own archive addresses and keyrings so that it works with
// whatever mirror the machine is set up for.
func (a *apt) ensureContrib() error {
	const op = "provision: enable Debian contrib"
	if _, err := os.Stat(contribSources); err == nil {
		return nil
	}
	stanzas, err := aptSourceStanzas()
	if err != nil {
		return &Error{Op: op, Err: err}
	}
	var b strings.Builder
	for _, s := range stanzas {
		if s.hasComponent("contrib") {
			return nil // already enabled
		}
	}
	for _, s := range stanzas {
		if !s.hasComponent("main") || !s.hasType("deb") || strings.Contains(s.get("Suites"), "security") {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Types: deb\nURIs: %s\nSuites: %s\nComponents: contrib\n", s.get("URIs"), s.get("Suites"))
		if k := s.get("Signed-By"); k != "" {
			fmt.Fprintf(&b, "Signed-By: %s\n", k)
		}
	}
	if b.Len() == 0 {
		return &Error{Op: op, Err: fmt.Errorf("no apt source with Debian's main component found under /etc/apt")}
	}
	fmt.Fprintf(a.cfg.Log, "pillar-lab: provision: enabling Debian contrib in %s\n", contribSources)
	if err := os.WriteFile(contribSources, []byte(b.String()), 0o644); err != nil {
		return &Error{Op: op, Path: contribSources, Err: err}
	}
	return nil
}

type aptStanza map[string]string

func (s aptStanza) get(k string) string { return s[strings.ToLower(k)] }
func (s aptStanza) hasComponent(c string) bool {
	return containsField(s.get("Components"), c)
}
func (s aptStanza) hasType(t string) bool { return containsField(s.get("Types"), t) }

func containsField(s, f string) bool {
	for _, x := range strings.Fields(s) {
		if x == f {
			return true
		}
	}
	return false
}

// aptSourceStanzas reads the host's apt sources in both formats: deb822
// (*.sources) and one-line (sources.list, *.list), as deb822 stanzas.
func aptSourceStanzas() ([]aptStanza, error) {
	var out []aptStanza
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, parseDeb822(string(b))...)
	}
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	lists = append([]string{"/etc/apt/sources.list"}, lists...)
	for _, f := range lists {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // sources.list is optional
		}
		out = append(out, parseOneLine(string(b))...)
	}
	return out, nil
}

func parseDeb822(text string) []aptStanza {
	var out []aptStanza
	cur := aptStanza{}
	var last string
	flush := func() {
		if len(cur) > 0 && !strings.EqualFold(cur["enabled"], "no") {
			out = append(out, cur)
		}
		cur = aptStanza{}
	}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "#"):
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				cur[last] += "\n" + line
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if ok {
				last = strings.ToLower(strings.TrimSpace(k))
				cur[last] = strings.TrimSpace(v)
			}
		}
	}
	flush()
	return out
}

// parseOneLine turns "deb [opts] URI SUITE COMP..." lines into stanzas.
func parseOneLine(text string) []aptStanza {
	var out []aptStanza
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		s := aptStanza{"types": f[0]}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			var opts []string
			for len(f) > 0 {
				opts = append(opts, strings.Trim(f[0], "[]"))
				done := strings.HasSuffix(f[0], "]")
				f = f[1:]
				if done {
					break
				}
			}
			for _, o := range opts {
				if k, v, ok := strings.Cut(o, "="); ok && k == "signed-by" {
					s["signed-by"] = v
				}
			}
		}
		if len(f) < 3 {
			continue
		}
		s["uris"], s["suites"], s["components"] = f[0], f[1], strings.Join(f[2:], " ")
		out = append(out, s)
	}
	return out
}

// policyRCD forbids maintainer scripts to start services while the lab
// installs packages: the host runs no init system for them, and
// zfsutils-linux's postinst would otherwise try to import pools and mount
// datasets with no ZFS module on the host. Exit code 101 is "action
// forbidden" in invoke-rc.d's policy interface.
const policyRCD = "/usr/sbin/policy-rc.d"

// install installs pkgs without recommends and without starting services.
func (a *apt) install(ctx context.Context, pkgs []string) error {
	if len(pkgs) == 0 {
		return nil
	}
	if err := a.update(ctx); err != nil {
		return err
	}
	if _, err := os.Stat(policyRCD); os.IsNotExist(err) {
		if err := os.WriteFile(policyRCD, []byte("#!/bin/sh\n# written by pillar-lab while it installs packages\nexit 101\n"), 0o755); err != nil {
			return &Error{Op: "provision: install host packages", Path: policyRCD, Err: err}
		}
		defer os.Remove(policyRCD)
	}
	fmt.Fprintf(a.cfg.Log, "pillar-lab: provision: apt-get install %s\n", strings.Join(pkgs, " "))
	args := append([]string{"install", "-y", "-q", "--no-install-recommends",
		"-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"}, pkgs...)
	_, err := a.cmd.run(ctx, "provision: install host packages", cmdOpts{
		timeout: a.cfg.StepTimeout, stream: true, env: []string{"DEBIAN_FRONTEND=noninteractive"},
	}, "apt-get", args...)
	if err != nil {
		return err
	}
	// apt-get succeeds for a package it held back only in odd setups;
	// check rather than trust, and name what is missing.
	miss, err := a.missing(ctx, pkgs)
	if err != nil {
		return err
	}
	if len(miss) > 0 {
		return &Error{Op: "provision: install host packages", Path: strings.Join(miss, " "), Err: fmt.Errorf("still not installed after apt-get install")}
	}
	return nil
}

// candidate returns the version apt would install for pkg, or "" if the
// archive does not have it.
func (a *apt) candidate(ctx context.Context, pkg string) (string, error) {
	out, err := a.cmd.run(ctx, "provision: apt-cache policy", cmdOpts{timeout: a.cfg.StepTimeout}, "apt-cache", "policy", pkg)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate:"); ok {
			v = strings.TrimSpace(v)
			if v == "(none)" {
				return "", nil
			}
			return v, nil
		}
	}
	return "", nil
}

// depends returns the Depends names (without version constraints or
// alternatives) of pkg at version ver.
func (a *apt) depends(ctx context.Context, pkg, ver string) ([]string, error) {
	spec := pkg
	if ver != "" {
		spec += "=" + ver
	}
	out, err := a.cmd.run(ctx, "provision: apt-cache show", cmdOpts{timeout: a.cfg.StepTimeout}, "apt-cache", "show", "--no-all-versions", spec)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		rest, ok := strings.CutPrefix(line, "Depends:")
		if !ok {
			continue
		}
		var names []string
		for _, d := range strings.Split(rest, ",") {
			alt := strings.TrimSpace(strings.Split(d, "|")[0])
			names = append(names, strings.Fields(alt)[0])
		}
		return names, nil
	}
	return nil, nil
}

// download fetches pkg=ver into dir and returns the .deb's path.
func (a *apt) download(ctx context.Context, dir, pkg, ver string) (string, error) {
	if err := a.update(ctx); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", &Error{Op: "provision: download", Path: dir, Err: err}
	}
	old, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	for _, f := range old {
		os.Remove(f)
	}
	fmt.Fprintf(a.cfg.Log, "pillar-lab: provision: apt-get download %s=%s\n", pkg, ver)
	// The sandbox user _apt cannot write into a root-owned cache directory.
	if _, err := a.cmd.run(ctx, "provision: apt-get download "+pkg, cmdOpts{dir: dir, timeout: a.cfg.StepTimeout},
		"apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", pkg+"="+ver); err != nil {
		return "", err
	}
	m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(m) != 1 {
		return "", &Error{Op: "provision: apt-get download", Path: pkg, Err: fmt.Errorf("expected one .deb in %s, found %d", dir, len(m))}
	}
	return m[0], nil
}

// extract unpacks a .deb's files into dir.
func (a *apt) extract(ctx context.Context, deb, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &Error{Op: "provision: unpack", Path: dir, Err: err}
	}
	_, err := a.cmd.run(ctx, "provision: unpack "+filepath.Base(deb), cmdOpts{timeout: a.cfg.StepTimeout}, "dpkg-deb", "-x", deb, dir)
	return err
}
