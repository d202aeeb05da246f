package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// labelFlags collects repeated -label key=value flags.
type labelFlags map[string]string

func (l labelFlags) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labelFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	l[k] = v
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: imagebuild build|check|pins|push [flags] (see the package documentation)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "build":
		err = runBuild(ctx, os.Args[2:])
	case "check":
		err = runCheck(ctx, os.Args[2:])
	case "pins":
		err = runPins(ctx, os.Args[2:])
	case "push":
		err = runPush(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build, check, pins or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func cacheFlags(fs *flag.FlagSet) (*string, *time.Duration) {
	cache := fs.String("cache", "/var/cache/pillar-csi/images", "download cache for Debian packages")
	timeout := fs.Duration("timeout", 5*time.Minute, "timeout of each external command (apt-get, dpkg-deb, chroot)")
	return cache, timeout
}

func runBuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	def := fs.String("def", "", "image definition directory (deploy/images/<name>)")
	root := fs.String("root", ".", "directory that relative file sources are resolved against")
	out := fs.String("out", "bin/images", "output directory")
	tag := fs.String("tag", "", "tag for images whose definition pins none")
	epoch := fs.String("source-date-epoch", "0", "mtime of every file and the image's created time, in seconds since 1970")
	labels := labelFlags{}
	fs.Var(labels, "label", "key=value label overriding the definition's (repeatable)")
	cache, timeout := cacheFlags(fs)
	_ = fs.Parse(args)
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil || secs < 0 {
		return fmt.Errorf("-source-date-epoch %q: want seconds since 1970", *epoch)
	}
	d, err := LoadDefinition(*def)
	if err != nil {
		return err
	}
	rootAbs, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := build(ctx, d, buildOptions{
		Root: rootAbs, Out: *out, Tag: *tag, Labels: labels, Epoch: time.Unix(secs, 0).UTC(),
		Cache: &debCache{dir: *cache, run: runner{timeout: *timeout}},
	})
	if err != nil {
		return err
	}
	fmt.Printf("%-58s %s  %6.1f MiB (rootfs %6.1f MiB)  %.1fs\n", res.Reference, res.Digest,
		float64(res.Size)/(1<<20), float64(res.RootfsSize)/(1<<20), time.Since(start).Seconds())
	return nil
}

func runCheck(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	def := fs.String("def", "", "image definition directory (deploy/images/<name>)")
	rootfs := fs.String("rootfs", "", "the image's root filesystem (bin/images/<name>.rootfs)")
	timeout := fs.Duration("timeout", 30*time.Second, "timeout of each check")
	_ = fs.Parse(args)
	d, err := LoadDefinition(*def)
	if err != nil {
		return err
	}
	return checkRootfs(ctx, d, *rootfs, runner{timeout: *timeout})
}

func runPins(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pins", flag.ExitOnError)
	update := fs.Bool("update", false, "rewrite stale pins to the archive's candidate versions")
	cache, timeout := cacheFlags(fs)
	_ = fs.Parse(args)
	stale, err := pins(ctx, os.Stdout, &debCache{dir: *cache, run: runner{timeout: *timeout}}, fs.Args(), *update)
	if err != nil {
		return err
	}
	if stale > 0 && !*update {
		return fmt.Errorf("%d stale pin(s): run `make images-update-pins`", stale)
	}
	return nil
}
