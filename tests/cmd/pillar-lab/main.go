// Command pillar-lab provisions and runs pillar-csi's real-kernel lab: a
// Debian kernel under QEMU (TCG) that runs the host's userland read-only
// over 9p, with nvmet, nvme-tcp, device-mapper and ZFS loaded.
//
//	pillar-lab provision              install and build what the lab needs (idempotent)
//	pillar-lab run [flags] -- CMD...  run CMD as root in the guest; its exit status is ours
//	pillar-lab shell [flags]          an interactive root shell in the guest
//	pillar-lab test [flags] [PATTERN...] [-- TESTFLAGS...]
//	                                  compile every kernel-tagged test package on the host
//	                                  and run it in the guest (what make test-kernel runs);
//	                                  with -peer-m, a second guest boots beside it (two kernels
//	                                  joined by a link: the end-to-end suite's storage node)
//
// Run from anywhere inside the workspace. Exit status: the guest command's
// for run, 0/1 for test, 124 when the VM hit its timeout, 125 when the lab
// itself failed. Environment: PILLAR_LAB_CACHE (cache directory) and
// PILLAR_LAB_KERNEL (Debian kernel ABI, e.g. 6.1.0-57; never replaced by
// another) set the defaults of -cache and -kernel.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

const (
	exitTimeout = 124
	exitLab     = 125
)

func usage() {
	fmt.Fprint(os.Stderr, `usage: pillar-lab provision|run|shell|test [flags] [args]
  provision                     install and build what the lab needs (idempotent)
  run [flags] -- CMD [ARG...]   run CMD as root in the guest; its exit status is ours
  shell [flags]                 interactive root shell in the guest (exit the shell to stop)
  test [flags] [PATTERN...] [-- TESTFLAGS...]
                                run kernel-tagged Go tests in the guest
Run "pillar-lab CMD -h" for the flags of CMD.
`)
}

// options are the flags every subcommand shares.
type options struct {
	cfg      kernelvm.Config
	vm       kernelvm.VMConfig
	keep     bool
	explicit string
	// packageTimeout is test's -package-timeout.
	packageTimeout time.Duration
	// peerMemoryMB and peerDisks are test's -peer-m and -peer-disks.
	peerMemoryMB int
	peerDisks    string
	peerCPUs     int
	// apiServer is test's -apiserver.
	apiServer bool
	// clusterControlPlane is test's -cluster-control-plane.
	clusterControlPlane bool
	// artifacts is test's -artifacts.
	artifacts string
}

func (o *options) register(fs *flag.FlagSet) {
	cache := os.Getenv("PILLAR_LAB_CACHE")
	if cache == "" {
		cache = kernelvm.DefaultCacheDir
	}
	fs.StringVar(&o.cfg.CacheDir, "cache", cache, "cache directory (env PILLAR_LAB_CACHE)")
	fs.StringVar(&o.explicit, "kernel", os.Getenv("PILLAR_LAB_KERNEL"),
		"Debian kernel ABI to boot, e.g. 6.1.0-57 (env PILLAR_LAB_KERNEL); default "+kernelvm.DefaultKernelABI+
			", replaced by the archive's current ABI with a warning if gone; an explicit one is never replaced")
	fs.IntVar(&o.vm.MemoryMB, "m", kernelvm.DefaultMemoryMB, "guest memory in MiB")
	fs.IntVar(&o.vm.CPUs, "smp", kernelvm.DefaultCPUs, "guest CPUs")
	fs.DurationVar(&o.vm.Timeout, "timeout", 30*time.Minute, "hard limit for the VM; qemu is killed after it")
	fs.BoolVar(&o.keep, "keep", false, "keep the run directory (console log, dmesg, test binaries) even on success")
}

func (o *options) config() kernelvm.Config {
	cfg := o.cfg
	if o.explicit != "" {
		cfg.KernelABI, cfg.KernelExplicit = o.explicit, true
	}
	return cfg
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sub, args := os.Args[1], os.Args[2:]
	var o options
	fs := flag.NewFlagSet("pillar-lab "+sub, flag.ExitOnError)
	o.register(fs)
	var code int
	switch sub {
	case "provision":
		fs.Parse(args)
		code = provision(ctx, &o)
	case "run":
		fs.Parse(args)
		code = run(ctx, &o, fs.Args())
	case "shell":
		fs.Parse(args)
		code = shell(ctx, &o)
	case "test":
		var run string
		fs.StringVar(&run, "run", "", "only run tests matching this regexp (passed as -test.run)")
		fs.DurationVar(&o.packageTimeout, "package-timeout", 0, "each test binary's -test.timeout (default 15m; a -test.timeout after -- wins)")
		fs.IntVar(&o.peerMemoryMB, "peer-m", 0, "boot a second guest (the peer of a two-guest run) with this much memory in MiB; it runs the first package's test binary as peer")
		fs.StringVar(&o.peerDisks, "peer-disks", "", "comma-separated sizes in MiB of the peer's raw disks, /dev/vda first")
		fs.IntVar(&o.peerCPUs, "peer-smp", 1, "the peer's CPUs")
		fs.StringVar(&o.artifacts, "artifacts", "", "copy what the tests wrote to $"+guest.ArtifactsEnv+" in the guest into this host directory after the run")
		fs.BoolVar(&o.apiServer, "apiserver", false, "run etcd and kube-apiserver from the workspace's bin/ on the host, with its CRDs, and give the guest "+
			"their kubeconfig in $"+kernelvm.KubeconfigEnv+" (tests/kernel/controller needs them)")
		fs.BoolVar(&o.clusterControlPlane, "cluster-control-plane", false, "run the lab cluster's control plane (etcd, kube-apiserver, controller manager, scheduler) from the workspace's bin/ "+
			"on the host, natively, and give the guest's cluster harness its directory in $"+cluster.ControlPlaneEnv+" (one-guest runs of tests/e2e)")
		// The test binary's arguments are split off before the flags are
		// parsed: the flag package drops a "--" that comes before any
		// package pattern, which would make them patterns.
		own, testArgs := splitTestArgs(args)
		fs.Parse(own)
		code = test(ctx, &o, fs.Args(), testArgs, run)
	case "-h", "-help", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "pillar-lab: unknown subcommand %q\n", sub)
		usage()
		code = 2
	}
	stop()
	os.Exit(code)
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "pillar-lab: %v\n", err)
	if kernelvm.IsTimeout(err) {
		return exitTimeout
	}
	return exitLab
}

func provision(ctx context.Context, o *options) int {
	if _, err := kernelvm.Provision(ctx, o.config()); err != nil {
		return fail(err)
	}
	return 0
}

// boot provisions and runs one guest script; it returns the exit code the
// command should end with.
func boot(ctx context.Context, o *options, opts kernelvm.BootOptions) int {
	lab, err := kernelvm.Provision(ctx, o.config())
	if err != nil {
		return fail(err)
	}
	r, err := lab.NewRun()
	if err != nil {
		return fail(err)
	}
	opts.VM = o.vm
	res, err := r.Boot(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-lab: run directory kept: %s\n", r.Dir)
		return fail(err)
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "pillar-lab: run directory kept: %s\n", r.Dir)
	} else {
		r.Remove()
	}
	return res.ExitStatus
}

func run(ctx context.Context, o *options, argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "usage: pillar-lab run [flags] -- CMD [ARG...]")
		return 2
	}
	wd, _ := os.Getwd()
	return boot(ctx, o, kernelvm.BootOptions{Script: kernelvm.CommandScript(wd, argv)})
}

func shell(ctx context.Context, o *options) int {
	wd, _ := os.Getwd()
	rows, cols := termSize()
	return boot(ctx, o, kernelvm.BootOptions{
		Script:      kernelvm.ShellScript(wd, rows, cols),
		Interactive: true,
		Stdin:       os.Stdin,
	})
}

// termSize returns the size of the terminal on stdin, or zeros.
func termSize() (rows, cols int) {
	var ws struct{ Row, Col, X, Y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, os.Stdin.Fd(), syscall.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws)))
	if errno != 0 {
		return 0, 0
	}
	return int(ws.Row), int(ws.Col)
}

// splitTestArgs splits pillar-lab test's arguments at the first "--":
// pillar-lab's flags and package patterns before it, the test binary's
// arguments after it.
func splitTestArgs(args []string) (own, testArgs []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return args, nil
}

func test(ctx context.Context, o *options, patterns, testArgs []string, runRE string) int {
	if runRE != "" {
		testArgs = append([]string{"-test.run=" + runRE}, testArgs...)
	}
	start := time.Now()
	wd, _ := os.Getwd()
	ws, err := kernelvm.FindWorkspace(ctx, wd)
	if err != nil {
		return fail(err)
	}
	all, err := ws.KernelPackages(ctx)
	if err != nil {
		return fail(err)
	}
	pkgs, err := kernelvm.MatchPackages(ws, all, patterns)
	if err != nil {
		return fail(err)
	}
	lab, err := kernelvm.Provision(ctx, o.config())
	if err != nil {
		return fail(err)
	}
	topts := kernelvm.TestOptions{VM: o.vm, TestArgs: testArgs, PackageTimeout: o.packageTimeout, Keep: o.keep, Expose: []string{ws.Root}, Artifacts: o.artifacts}
	if o.peerMemoryMB > 0 {
		p := &kernelvm.PeerOptions{VM: kernelvm.VMConfig{MemoryMB: o.peerMemoryMB, CPUs: o.peerCPUs, Timeout: o.vm.Timeout}}
		for _, f := range strings.FieldsFunc(o.peerDisks, func(r rune) bool { return r == ',' }) {
			mib, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || mib <= 0 {
				return fail(fmt.Errorf("-peer-disks: %q is not a size in MiB", f))
			}
			p.DiskMiB = append(p.DiskMiB, mib)
		}
		topts.Peer = p
	} else if o.peerDisks != "" {
		return fail(errors.New("-peer-disks needs -peer-m"))
	}
	if o.apiServer && o.clusterControlPlane {
		return fail(errors.New("-apiserver and -cluster-control-plane: one host control plane per run"))
	}
	if o.clusterControlPlane {
		if topts.Peer != nil {
			return fail(errors.New("-cluster-control-plane: a two-guest run has no host network"))
		}
		stop, err := startClusterControlPlane(ctx, ws.Root, &topts)
		if err != nil {
			return fail(err)
		}
		passed := false
		defer func() { stop(passed) }()
		rep, err := lab.RunTests(ctx, pkgs, topts)
		passed = err == nil && rep.OK()
		return report(rep, err, start)
	}
	if o.apiServer {
		stop, err := startAPIServer(ws.Root, &topts)
		if err != nil {
			return fail(err)
		}
		passed := false
		defer func() { stop(passed) }()
		rep, err := lab.RunTests(ctx, pkgs, topts)
		passed = err == nil && rep.OK()
		return report(rep, err, start)
	}
	rep, err := lab.RunTests(ctx, pkgs, topts)
	return report(rep, err, start)
}

// report prints the summary of a test run and returns test's exit code.
func report(rep *kernelvm.TestReport, err error, start time.Time) int {
	if rep != nil {
		rep.Total = time.Since(start)
		rep.WriteSummary(os.Stdout)
	}
	if err != nil {
		return fail(err)
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// startClusterControlPlane starts the lab cluster's control plane on
// the host and adds what reaches it to topts. Its logs stay, and are
// named, unless the tests passed.
func startClusterControlPlane(ctx context.Context, root string, topts *kernelvm.TestOptions) (stop func(passed bool), err error) {
	dir, err := os.MkdirTemp("", "pillar-lab-control-plane-")
	if err != nil {
		return nil, err
	}
	egress, err := cluster.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	began := time.Now()
	cp, err := cluster.StartHostControlPlane(ctx, cluster.HostControlPlaneOptions{
		BinDir:         filepath.Join(root, "bin"),
		Dir:            dir,
		EgressHostPort: egress,
		Log:            os.Stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("%w (its files: %s)", err, dir)
	}
	fmt.Fprintf(os.Stderr, "pillar-lab: the lab cluster's control plane on the host ready in %v; the guest reaches it at %s, and it the kubelets through port %d\n",
		time.Since(began).Round(10*time.Millisecond), kernelvm.HostAddr, egress)
	topts.HostNet = true
	topts.Forward = append(topts.Forward, kernelvm.PortForward{HostPort: egress, GuestPort: cluster.EgressPort})
	topts.Expose = append(topts.Expose, dir)
	topts.Env = append(topts.Env, cluster.ControlPlaneEnv+"="+dir)
	return func(passed bool) {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pillar-lab: stop the host's control plane: %v\n", err)
		}
		if passed {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "pillar-lab: the host's control plane's logs kept: %s\n", strings.Join(cp.Logs(), " "))
		}
	}, nil
}

// startAPIServer starts etcd and kube-apiserver on the host for the
// guest's tests and adds what reaches them to topts. Their output goes to
// a log that stop keeps, and names, unless the tests passed.
func startAPIServer(root string, topts *kernelvm.TestOptions) (stop func(passed bool), err error) {
	dir, err := os.MkdirTemp("", "pillar-lab-apiserver-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "apiserver.log")
	logf, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	began := time.Now()
	a, err := kernelvm.StartAPIServer(kernelvm.APIServerOptions{
		Bin:    filepath.Join(root, "bin"),
		CRDDir: filepath.Join(root, "api", "config", "crd"),
		Dir:    dir,
		Log:    logf,
	})
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("%w (its output: %s)", err, logPath)
	}
	fmt.Fprintf(os.Stderr, "pillar-lab: etcd and kube-apiserver on the host ready in %v, CRDs served; the guest reaches them at %s\n",
		time.Since(began).Round(10*time.Millisecond), kernelvm.HostAddr)
	topts.HostNet = true
	topts.Expose = append(topts.Expose, dir)
	topts.Env = append(topts.Env, kernelvm.KubeconfigEnv+"="+a.Kubeconfig)
	return func(passed bool) {
		a.Stop()
		logf.Close()
		if passed {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "pillar-lab: the host's etcd and kube-apiserver output kept: %s\n", logPath)
		}
	}, nil
}
