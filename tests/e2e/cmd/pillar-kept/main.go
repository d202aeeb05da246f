// Command pillar-kept keeps a lab cluster up between end-to-end test runs
// (package kept):
//
//	pillar-kept up [-m MiB] [-lifetime D]   boot a guest with the cluster, return once it is ready
//	pillar-kept run [-run RE] [-- TESTFLAGS...]
//	                                        compile tests/e2e/pillar and run it against the kept cluster
//	pillar-kept down                        tear the kept cluster down and power its guest off
//
// and, started by those, serve (the host's supervisor of the guest) and
// guest (the keeper inside it). Run from inside the workspace, as root.
// Exit status: run's is the test binary's; 125 when pillar-kept itself
// failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/kept"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm"
)

const exitFailed = 125

func usage() {
	fmt.Fprint(os.Stderr, `usage: pillar-kept up|run|down [flags]
  up [-m MiB] [-lifetime D]      boot a lab guest with the cluster kept up; returns once it is ready
  run [-run RE] [-- TESTFLAGS]   compile tests/e2e/pillar and run it against the kept cluster
  down                           tear the kept cluster down and power its guest off
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sub, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet("pillar-kept "+sub, flag.ExitOnError)
	o := kept.HostOptions{Stdout: os.Stdout}
	cache := os.Getenv("PILLAR_LAB_CACHE")
	if cache == "" {
		cache = kernelvm.DefaultCacheDir
	}
	fs.StringVar(&o.Lab.CacheDir, "cache", cache, "the lab's cache directory (env PILLAR_LAB_CACHE)")
	kernel := fs.String("kernel", os.Getenv("PILLAR_LAB_KERNEL"), "Debian kernel ABI to boot (env PILLAR_LAB_KERNEL), as pillar-lab's -kernel")
	fs.StringVar(&o.Root, "root", "", "the workspace root (default: go.work's directory above the working directory)")
	fs.IntVar(&o.MemoryMB, "m", 3072, "guest memory in MiB (as make e2e's)")
	fs.IntVar(&o.CPUs, "smp", kernelvm.DefaultCPUs, "guest CPUs")
	fs.DurationVar(&o.Lifetime, "lifetime", 4*time.Hour, "the longest the kept guest runs; the cluster is torn down ten minutes before")
	var runRE, channel string
	var downTimeout time.Duration
	switch sub {
	case "run":
		fs.StringVar(&runRE, "run", "", "only run tests matching this regexp (passed as -test.run)")
	case "down":
		fs.DurationVar(&downTimeout, "timeout", 5*time.Minute, "how long the teardown may take before QEMU is killed")
	case "guest":
		fs.StringVar(&channel, "channel", "", "the channel directory (in the run's output share)")
	case "up", "serve":
	default:
		usage()
		os.Exit(2)
	}
	fs.Parse(args)
	if *kernel != "" {
		o.Lab.KernelABI, o.Lab.KernelExplicit = *kernel, true
	}
	if o.Root == "" {
		root, err := cluster.RepoRoot()
		if err != nil {
			os.Exit(fail(err))
		}
		o.Root = root
	}
	self, err := os.Executable()
	if err != nil {
		os.Exit(fail(err))
	}
	o.Self = self

	code := 0
	switch sub {
	case "up":
		code = up(ctx, o)
	case "serve":
		if err := kept.Supervise(ctx, o); err != nil {
			code = fail(err)
		}
	case "guest":
		code = kept.Main(ctx, kept.KeepOptions{Channel: kept.Channel{Dir: channel}, Root: o.Root, Lifetime: o.Lifetime})
	case "run":
		testArgs := fs.Args()
		if len(testArgs) > 0 && testArgs[0] == "--" {
			testArgs = testArgs[1:]
		}
		if runRE != "" {
			testArgs = append([]string{"-test.run=" + runRE}, testArgs...)
		}
		st, err := kept.RunTest(ctx, o, kept.RunOptions{
			ModuleDir:  filepath.Join(o.Root, "tests"),
			ImportPath: "./e2e/pillar",
			Dir:        filepath.Join(o.Root, "tests", "e2e", "pillar"),
			Args:       testArgs,
			Stderr:     os.Stderr,
		})
		if err != nil {
			code = fail(err)
		} else {
			code = st
		}
	case "down":
		t0 := time.Now()
		if err := kept.Down(ctx, o, downTimeout); err != nil {
			code = fail(err)
		} else {
			fmt.Printf("pillar-kept: down in %.1fs\n", time.Since(t0).Seconds())
		}
	}
	stop()
	os.Exit(code)
}

func up(ctx context.Context, o kept.HostOptions) int {
	t0 := time.Now()
	s, err := kept.Up(ctx, o)
	if err != nil {
		return fail(err)
	}
	fmt.Printf(`
pillar-kept: the kept lab cluster is ready after %.1fs (QEMU pid %d; it stops by itself at %s).
  make e2e-run RUN='^TestQuickstart$'   compile tests/e2e/pillar and run it against this cluster
                                        (the first run that needs the driver installs it; later runs reuse the install)
  make e2e-down                         tear it down
  guest console: %s
`, time.Since(t0).Seconds(), s.QEMUPID, s.Deadline.Format(time.DateTime), s.Console())
	return 0
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "pillar-kept: %v\n", err)
	return exitFailed
}
