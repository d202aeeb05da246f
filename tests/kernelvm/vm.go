package kernelvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// VMConfig sizes and bounds one boot.
type VMConfig struct {
	MemoryMB int           // DefaultMemoryMB if zero
	CPUs     int           // DefaultCPUs if zero
	Timeout  time.Duration // hard limit; QEMU's process group is killed after it. 30 minutes if zero.
	// LockupLimit ends a boot whose guest kernel reports a CPU stuck this
	// long (its soft-lockup watchdog, on the console): QEMU is killed and
	// Boot returns ErrLockup with the report. DefaultLockupLimit if zero;
	// negative never.
	LockupLimit time.Duration
	// KernelArgs are appended to the guest kernel command line.
	KernelArgs []string
}

// Run is one boot of the lab. Its directory, under the cache directory
// (never under /tmp, which the guest hides behind its own tmpfs), holds
// what the guest runs — guest.sh and anything the caller puts there, such
// as test binaries — and out/, the guest's only writable window to the
// host, where it leaves its exit status, dmesg and test results. Every run
// has its own directory and QEMU opens no ports, so several runs may boot
// at once.
type Run struct {
	lab *Lab
	Dir string
}

// runsDir holds the runs; directories older than staleRunAge are removed
// when a new run starts (failed runs are kept for inspection).
const staleRunAge = 24 * time.Hour

// NewRun creates a fresh run directory.
func (l *Lab) NewRun() (*Run, error) {
	runs := filepath.Join(l.CacheDir, "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		return nil, &Error{Op: "create run", Path: runs, Err: err}
	}
	if ents, err := os.ReadDir(runs); err == nil {
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleRunAge {
				os.RemoveAll(filepath.Join(runs, e.Name()))
			}
		}
	}
	dir, err := os.MkdirTemp(runs, "run-")
	if err != nil {
		return nil, &Error{Op: "create run", Path: runs, Err: err}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, &Error{Op: "create run", Path: dir, Err: err}
	}
	if err := os.Mkdir(filepath.Join(dir, "out"), 0o755); err != nil {
		return nil, &Error{Op: "create run", Path: dir, Err: err}
	}
	return &Run{lab: l, Dir: dir}, nil
}

// OutDir is where the guest writes what it hands back.
func (r *Run) OutDir() string { return filepath.Join(r.Dir, "out") }

// Remove deletes the run directory.
func (r *Run) Remove() error { return os.RemoveAll(r.Dir) }

// BootOptions says what one boot runs and where its console goes.
type BootOptions struct {
	VM VMConfig
	// Script is the body of guest.sh, run by /bin/sh as root in the
	// guest's chroot. Its exit status is the boot's.
	Script string
	// Interactive connects the guest's serial console to Stdin and Stdout
	// unfiltered (for a shell); QEMU then owns the terminal and Ctrl-A x
	// stops the VM.
	Interactive bool
	Stdin       io.Reader
	Stdout      io.Writer // os.Stdout if nil
	// OnLine, if set, sees every console line of a non-interactive boot,
	// without its line ending, as it arrives.
	OnLine func(line string)

	// Link, if set, gives the guest a virtio NIC on a virtual Ethernet
	// link to another guest.
	Link *Link
	// Disks are raw image files attached as virtio disks, /dev/vda first:
	// unlike the guest's tmpfs, what is written to them survives the
	// guest's power cut.
	Disks []string
	// OnStart, if set, is called with QEMU's process ID once it has
	// started: a guest kept running in the background (make e2e-up) is
	// found, and found dead, by it. QEMU leads its own process group
	// unless Interactive.
	OnStart func(pid int)

	// HostNet gives the guest a second way out besides 9p: a virtio NIC
	// on QEMU's user-mode network, through which it reaches the host's
	// loopback at HostAddr (the script brings it up with HostNetScript).
	// QEMU translates the guest's connections into its own, so the guest
	// reaches whatever the host reaches; only the lab's own tests run
	// there.
	HostNet bool
	// Forward lists TCP ports of the host's loopback that QEMU forwards
	// to the guest's HostNet address: the way in for a host process that
	// must reach a guest's server (the host's API server reaching the
	// lab cluster's kubelets). Needs HostNet.
	Forward []PortForward

	// Share, if set, is a host directory the guest can mount with 9p tag
	// ShareTag, uncached, so that writes from the host or another guest
	// sharing it are seen at once.
	Share string
}

// ShareTag is the 9p mount tag of BootOptions.Share.
const ShareTag = "labshare"

// Link is one end of a virtual Ethernet link between two guests: QEMU's
// dgram netdev, UDP datagrams between two ports on 127.0.0.1. It needs no
// start order and survives either side rebooting (a stream socket link
// does not come back when the side that connected reboots); the guests'
// addresses on it exist only inside the guests.
type Link struct {
	LocalPort, RemotePort int
	MAC                   string
}

// BootResult is what a boot that reached its end reports.
type BootResult struct {
	ExitStatus int           // of guest.sh
	Elapsed    time.Duration // from starting QEMU to QEMU's exit
}

// Boot boots the guest, runs the script and waits for the guest to power
// off. It returns an error (and no exit status) when the lab itself failed:
// QEMU could not start, the guest panicked or the init script gave up,
// or the timeout expired. The console is also saved as console.log in the
// run directory.
func (r *Run) Boot(ctx context.Context, o BootOptions) (BootResult, error) {
	const op = "boot"
	vm := o.VM
	if vm.MemoryMB == 0 {
		vm.MemoryMB = DefaultMemoryMB
	}
	if vm.CPUs == 0 {
		vm.CPUs = DefaultCPUs
	}
	if vm.Timeout == 0 {
		vm.Timeout = 30 * time.Minute
	}
	if vm.LockupLimit == 0 {
		vm.LockupLimit = DefaultLockupLimit
	}
	stdout := o.Stdout
	if stdout == nil {
		stdout = os.Stdout
	}
	script := filepath.Join(r.Dir, "guest.sh")
	if err := os.WriteFile(script, []byte(o.Script), 0o755); err != nil {
		return BootResult{}, &Error{Op: op, Path: script, Err: err}
	}
	for _, f := range []string{"exit-status", "init-error"} {
		os.Remove(filepath.Join(r.OutDir(), f))
	}

	append_ := []string{
		"console=ttyS0", "quiet", "loglevel=3", "panic=-1",
		// A soft lockup's report shows every CPU's stack, not only the
		// stuck one's (init makes the stacks reach the console).
		"softlockup_all_cpu_backtrace=1",
		// Spectre/Meltdown mitigations only slow an emulated CPU down.
		"mitigations=off",
		guest.Marker, "pillar.run=" + r.Dir,
	}
	if r.lab.ModuleTree != "" {
		append_ = append(append_, guest.ModuleTreeParam+"="+r.lab.ModuleTree)
	}
	append_ = append(append_, vm.KernelArgs...)
	chardev := "stdio,id=con,signal=off"
	if o.Interactive {
		chardev += ",mux=on"
	}
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		// TCG: /dev/kvm exists on our machines but runs no guest.
		"-accel", "tcg", "-cpu", "max",
		"-m", strconv.Itoa(vm.MemoryMB), "-smp", strconv.Itoa(vm.CPUs),
		"-kernel", r.lab.Kernel, "-initrd", r.lab.Initramfs,
		"-append", strings.Join(append_, " "),
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + qemuEscape(r.OutDir()) + ",mount_tag=labout,security_model=none,multidevs=remap",
		"-chardev", chardev, "-serial", "chardev:con",
	}
	if o.Share != "" {
		args = append(args, "-virtfs", "local,path="+qemuEscape(o.Share)+",mount_tag="+ShareTag+",security_model=none,multidevs=remap")
	}
	if l := o.Link; l != nil {
		args = append(args,
			"-netdev", fmt.Sprintf("dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=%d,remote.type=inet,remote.host=127.0.0.1,remote.port=%d", l.LocalPort, l.RemotePort),
			"-device", "virtio-net-pci,netdev=n0,mac="+l.MAC)
	}
	if o.HostNet {
		if o.Link != nil {
			return BootResult{}, &Error{Op: op, Err: errors.New("a guest has either a link to another guest or the host's network, not both")}
		}
		netdev := "user,id=h0,ipv6=off,net=10.0.2.0/24"
		for _, f := range o.Forward {
			netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", f.HostPort, f.GuestPort)
		}
		args = append(args,
			"-netdev", netdev,
			"-device", "virtio-net-pci,netdev=h0,mac=52:54:00:99:01:01")
	} else if len(o.Forward) > 0 {
		return BootResult{}, &Error{Op: op, Err: errors.New("port forwards need the host's network (HostNet)")}
	}
	for i, d := range o.Disks {
		args = append(args,
			"-drive", fmt.Sprintf("file=%s,if=none,id=d%d,format=raw,cache=writeback,aio=threads", qemuEscape(d), i),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=d%d", i))
	}
	cmd := exec.Command(r.lab.QEMU, args...)
	console, err := os.Create(filepath.Join(r.Dir, "console.log"))
	if err != nil {
		return BootResult{}, &Error{Op: op, Path: r.Dir, Err: err}
	}
	defer console.Close()

	var streamed chan struct{}
	lockedUp := make(chan string, 1)
	onLine := o.OnLine
	if vm.LockupLimit > 0 {
		onLine = func(line string) {
			if d, ok := softLockup(line); ok && d >= vm.LockupLimit {
				select {
				case lockedUp <- line:
				default:
				}
			}
			if o.OnLine != nil {
				o.OnLine(line)
			}
		}
	}
	if o.Interactive {
		// QEMU must stay in the terminal's foreground process group to
		// read it, so it gets no group of its own; it forks nothing.
		cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, io.MultiWriter(stdout, console), os.Stderr
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdin = nil // /dev/null: nothing types into a test run
		pr, pw, err := os.Pipe()
		if err != nil {
			return BootResult{}, &Error{Op: op, Err: err}
		}
		cmd.Stdout, cmd.Stderr = pw, pw
		streamed = make(chan struct{})
		go func() {
			defer close(streamed)
			streamConsole(pr, stdout, console, onLine)
			pr.Close()
		}()
		defer pw.Close()
	}

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return BootResult{}, &Error{Op: op, Cmd: cmd.Args[:1], Err: err}
	}
	if o.OnStart != nil {
		o.OnStart(cmd.Process.Pid)
	}
	if pw, ok := cmd.Stdout.(*os.File); ok && !o.Interactive {
		pw.Close() // the child holds its own copy; EOF comes when QEMU exits
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(vm.Timeout)
	defer timer.Stop()
	var waitErr, killed error
	select {
	case waitErr = <-done:
	case <-timer.C:
		killed = fmt.Errorf("%w after %v: QEMU killed", ErrTimeout, vm.Timeout)
	case line := <-lockedUp:
		killed = fmt.Errorf("%w (%s): QEMU killed; the stacks are in console.log", ErrLockup, strings.TrimSpace(line))
	case <-ctx.Done():
		killed = fmt.Errorf("interrupted: QEMU killed: %w", ctx.Err())
	}
	if killed != nil {
		if o.Interactive {
			cmd.Process.Kill()
		} else {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		<-done
	}
	if streamed != nil {
		<-streamed
	}
	res := BootResult{Elapsed: time.Since(start)}
	if killed != nil {
		return res, &Error{Op: op, Path: r.Dir, Err: killed}
	}
	if b, err := os.ReadFile(filepath.Join(r.OutDir(), "init-error")); err == nil {
		return res, &Error{Op: op, Path: r.Dir, Err: fmt.Errorf("guest init failed: %s", strings.TrimSpace(string(b)))}
	}
	b, err := os.ReadFile(filepath.Join(r.OutDir(), "exit-status"))
	if err != nil {
		if waitErr == nil {
			waitErr = errors.New("guest powered off")
		}
		return res, &Error{Op: op, Path: r.Dir, Err: fmt.Errorf("no exit status from the guest (kernel panic or init failure? see console.log): %w", waitErr)}
	}
	st, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return res, &Error{Op: op, Path: r.Dir, Err: fmt.Errorf("bad exit status %q: %w", b, err)}
	}
	res.ExitStatus = st
	return res, nil
}

// streamConsole copies the serial console to out and log line by line,
// dropping the carriage returns the guest's tty adds.
func streamConsole(r io.Reader, out, log io.Writer, onLine func(string)) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			line = strings.ReplaceAll(line, "\r", "")
			io.WriteString(out, line)
			io.WriteString(log, line)
			if onLine != nil {
				onLine(strings.TrimSuffix(line, "\n"))
			}
		}
		if err != nil {
			return
		}
	}
}

// DefaultLockupLimit is how long a guest CPU may stay stuck before the
// boot is ended. A TCG vCPU the host leaves unscheduled for the watchdog's
// 20 s is reported stuck and then recovers; a kernel that stays stuck for
// minutes does not recover, and would otherwise hold the boot until its
// timeout (a 45-minute CI suite) with nothing more to show.
const DefaultLockupLimit = 3 * time.Minute

// softLockupRE matches the soft-lockup watchdog's report,
// "watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [etcd:327]".
var softLockupRE = regexp.MustCompile(`BUG: soft lockup - CPU#\d+ stuck for (\d+)s!`)

// softLockup returns how long a soft-lockup report on a console line says
// its CPU has been stuck.
func softLockup(line string) (time.Duration, bool) {
	m := softLockupRE.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// qemuEscape doubles commas, QEMU's escape inside option values.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// guestEnv is the environment every guest script starts with: the chroot
// inherits only what init had.
const guestEnv = `export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TMPDIR=/tmp LANG=C.UTF-8 TERM=${TERM:-linux}
`

// PortForward is a TCP port of the host's loopback that QEMU forwards to
// a port of the guest (BootOptions.Forward).
type PortForward struct {
	HostPort, GuestPort int
}

// HostAddr is the host as a guest with BootOptions.HostNet reaches it:
// QEMU's user-mode network forwards a connection to HostAddr:port to
// 127.0.0.1:port on the host.
const HostAddr = "10.0.2.2"

// GuestAddr is the guest's own address on the host's network
// (HostNetScript), where BootOptions.Forward delivers.
const GuestAddr = "10.0.2.15"

// HostNetScript is the guest shell line that brings up the NIC of
// BootOptions.HostNet as eth0 with the address GuestAddr/24 (no route
// beyond that network, no DNS).
const HostNetScript = `modprobe virtio_net && ip link set eth0 up && ip addr add ` + GuestAddr + `/24 dev eth0 || { echo "pillar-lab: cannot bring up the host's network (eth0)" >&2; exit 1; }
`

// hiddenByGuest reports whether the guest's own tmpfs on /tmp hides the
// host path p.
func hiddenByGuest(p string) bool {
	p = filepath.Clean(p)
	return p == "/tmp" || strings.HasPrefix(p, "/tmp/")
}

// exposeScript returns guest shell lines that make the host directories
// dirs visible again at their own paths when the guest's /tmp hides them
// (a CI checkout under /tmp, say): each gets a writable overlay of the
// host's copy, which init keeps reachable under /run/pillar-lab/host.
func exposeScript(dirs []string) string {
	var b strings.Builder
	seen := map[string]bool{}
	n := 0
	dirs = slices.Clone(dirs)
	slices.Sort(dirs) // parents before their children
	for _, d := range dirs {
		d = filepath.Clean(d)
		if !hiddenByGuest(d) || seen[d] {
			continue
		}
		covered := false
		for s := range seen {
			if strings.HasPrefix(d, s+"/") {
				covered = true
			}
		}
		if covered {
			continue
		}
		seen[d] = true
		ov := fmt.Sprintf("/run/pillar-lab/expose/%d", n)
		n++
		fmt.Fprintf(&b, "mkdir -p %s/u %s/w %s && mount -t overlay -o lowerdir=%s,upperdir=%s/u,workdir=%s/w overlay %s || exit 125\n",
			ov, ov, shellQuote(d), shellQuote("/run/pillar-lab/host"+d), ov, ov, shellQuote(d))
	}
	return b.String()
}

// CommandScript returns a guest script that runs argv as root in dir (or
// / if dir is empty).
func CommandScript(dir string, argv []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString(guestEnv)
	if dir != "" {
		b.WriteString(exposeScript([]string{dir}))
		fmt.Fprintf(&b, "cd %s 2>/dev/null || cd /\n", shellQuote(dir))
	}
	b.WriteString("exec")
	for _, a := range argv {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString("\n")
	return b.String()
}

// ShellScript returns a guest script for an interactive root shell with job
// control on the serial console, sized rows x cols if both are positive.
func ShellScript(dir string, rows, cols int) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString(guestEnv)
	if dir != "" {
		b.WriteString(exposeScript([]string{dir}))
		fmt.Fprintf(&b, "cd %s 2>/dev/null || cd /\n", shellQuote(dir))
	}
	if rows > 0 && cols > 0 {
		fmt.Fprintf(&b, "stty rows %d cols %d </dev/ttyS0\n", rows, cols)
	}
	b.WriteString("echo 'pillar-lab: root shell in the guest; exit it to power off (or Ctrl-A x)'\n")
	// init's stdio is /dev/console, which cannot be a controlling
	// terminal; give bash ttyS0 as one so that Ctrl-C and job control work.
	// --norc: a host's ~/.bashrc (pyenv, completion) can take a minute
	// to run under TCG; "source ~/.bashrc" by hand if it is wanted.
	b.WriteString("export PS1='\\u@\\h:\\w\\$ '\n")
	b.WriteString("exec setsid --ctty --wait /bin/bash --norc -i </dev/ttyS0 >/dev/ttyS0 2>&1\n")
	return b.String()
}
