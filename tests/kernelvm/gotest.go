package kernelvm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/build/constraint"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// KernelTag is the build tag of real-kernel tests.
const KernelTag = "kernel"

// TestPackage is a Go package with kernel-tagged test files.
type TestPackage struct {
	ImportPath string
	Dir        string // package directory
	ModuleDir  string // its module's root, where `go test -c` runs
	Rel        string // Dir relative to the workspace root, e.g. tests/kernel/smoke
}

// Workspace is the set of modules of a go.work file.
type Workspace struct {
	Root    string   // directory of go.work
	Modules []string // absolute module directories
}

// FindWorkspace locates the go.work that governs dir (as the go command
// does) and lists its modules.
func FindWorkspace(ctx context.Context, dir string) (*Workspace, error) {
	const op = "find workspace"
	c := &commander{log: io.Discard}
	// GOWORK=off in our own environment (make builds us that way) must
	// not hide the workspace we are asked to search.
	out, err := c.run(ctx, op, cmdOpts{dir: dir, timeout: time.Minute, env: []string{"GOWORK="}}, "go", "env", "GOWORK")
	if err != nil {
		return nil, err
	}
	gowork := strings.TrimSpace(string(out))
	if gowork == "" || gowork == "off" {
		return nil, &Error{Op: op, Path: dir, Err: fmt.Errorf("not inside a Go workspace (no go.work found)")}
	}
	out, err = c.run(ctx, op, cmdOpts{dir: dir, timeout: time.Minute}, "go", "work", "edit", "-json", gowork)
	if err != nil {
		return nil, err
	}
	var wf struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &wf); err != nil {
		return nil, &Error{Op: op, Path: gowork, Err: err}
	}
	ws := &Workspace{Root: filepath.Dir(gowork)}
	for _, u := range wf.Use {
		p := u.DiskPath
		if !filepath.IsAbs(p) {
			p = filepath.Join(ws.Root, p)
		}
		ws.Modules = append(ws.Modules, filepath.Clean(p))
	}
	return ws, nil
}

// KernelPackages lists every package of every module in ws that has test
// files constrained by the kernel tag, module by module with GOWORK=off, as
// `go test` will build them.
func (ws *Workspace) KernelPackages(ctx context.Context) ([]TestPackage, error) {
	const op = "find kernel-tagged tests"
	c := &commander{log: io.Discard}
	var pkgs []TestPackage
	for _, mod := range ws.Modules {
		out, err := c.run(ctx, op, cmdOpts{dir: mod, timeout: 5 * time.Minute, env: []string{"GOWORK=off"}},
			"go", "list", "-e", "-tags", KernelTag, "-json=ImportPath,Dir,TestGoFiles,XTestGoFiles", "./...")
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for dec.More() {
			var p struct {
				ImportPath, Dir           string
				TestGoFiles, XTestGoFiles []string
			}
			if err := dec.Decode(&p); err != nil {
				return nil, &Error{Op: op, Path: mod, Err: err}
			}
			tagged := false
			for _, f := range append(p.TestGoFiles, p.XTestGoFiles...) {
				ok, err := hasTag(filepath.Join(p.Dir, f), KernelTag)
				if err != nil {
					return nil, &Error{Op: op, Path: f, Err: err}
				}
				tagged = tagged || ok
			}
			if !tagged {
				continue
			}
			rel, _ := filepath.Rel(ws.Root, p.Dir)
			pkgs = append(pkgs, TestPackage{ImportPath: p.ImportPath, Dir: p.Dir, ModuleDir: mod, Rel: filepath.ToSlash(rel)})
		}
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Rel < pkgs[j].Rel })
	return pkgs, nil
}

// hasTag reports whether the file's //go:build line mentions tag.
func hasTag(path, tag string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || (strings.HasPrefix(line, "//") && !constraint.IsGoBuild(line)) {
			continue
		}
		if !constraint.IsGoBuild(line) {
			return false, nil // the constraint must precede the package clause
		}
		expr, err := constraint.Parse(line)
		if err != nil {
			return false, err
		}
		found := false
		expr.Eval(func(t string) bool {
			found = found || t == tag
			return true
		})
		return found, nil
	}
	return false, sc.Err()
}

// OwnBootDir holds the packages that need a boot of their own: the
// end-to-end suites, whose TestMain turns the guest into a Kubernetes node
// (shared mount propagation, cgroup delegation, the whole module tree,
// iptables rules) for the rest of the boot. They run only when a pattern
// names them (make e2e), never in a run of everything (make test-kernel).
const OwnBootDir = "tests/e2e"

// MatchPackages selects the packages named by patterns. A pattern is a
// module directory ("configfs"), a workspace-relative directory pattern
// ("tests/kernel/...", "./configfs/internal/x") or an import path pattern
// (".../tests/kernel/smoke"); "..." matches any string. No patterns means
// all but those under OwnBootDir. A pattern that matches nothing is an
// error, so that a typo cannot turn into a green run of nothing.
func MatchPackages(ws *Workspace, pkgs []TestPackage, patterns []string) ([]TestPackage, error) {
	if len(patterns) == 0 {
		var out []TestPackage
		for _, p := range pkgs {
			if p.Rel != OwnBootDir && !strings.HasPrefix(p.Rel, OwnBootDir+"/") {
				out = append(out, p)
			}
		}
		return out, nil
	}
	var out []TestPackage
	seen := map[string]bool{}
	for _, pat := range patterns {
		p := strings.TrimSuffix(strings.TrimPrefix(filepath.ToSlash(pat), "./"), "/")
		for _, m := range ws.Modules {
			if rel, _ := filepath.Rel(ws.Root, m); filepath.ToSlash(rel) == p {
				p += "/..."
			}
		}
		re := patternRegexp(p)
		n := 0
		for _, pkg := range pkgs {
			if re.MatchString(pkg.Rel) || re.MatchString(pkg.ImportPath) {
				n++
				if !seen[pkg.ImportPath] {
					seen[pkg.ImportPath] = true
					out = append(out, pkg)
				}
			}
		}
		if n == 0 {
			return nil, &Error{Op: "match packages", Path: pat, Err: fmt.Errorf("matches no package with %s-tagged tests", KernelTag)}
		}
	}
	return out, nil
}

// patternRegexp follows the go command: "x/..." also matches "x".
func patternRegexp(p string) *regexp.Regexp {
	re := regexp.QuoteMeta(p)
	re = strings.ReplaceAll(re, `/\.\.\.`, `(/.*)?`)
	re = strings.ReplaceAll(re, `\.\.\.`, `.*`)
	return regexp.MustCompile("^" + re + "$")
}

// TestOptions says how RunTests runs the packages.
type TestOptions struct {
	VM VMConfig
	// TestArgs are passed to every test binary after -test.v, e.g.
	// -test.run=TestSmoke.
	TestArgs []string
	// PackageTimeout is each binary's -test.timeout (15 minutes if zero; a later
	// -test.timeout in TestArgs overrides it).
	PackageTimeout time.Duration
	Stdout         io.Writer // os.Stdout if nil
	Log            io.Writer // os.Stderr if nil
	// Peer, if set, makes the run a two-guest run: a second guest boots
	// next to the one that runs the tests, joined to it by a link, and
	// runs the first package's test binary too, with guest.RolePeer on its
	// kernel command line (that binary's TestMain decides what a peer
	// does). Its console is copied to Stdout, each line marked "peer| ".
	Peer *PeerOptions
	// Keep keeps the run directory (and the peer's) even when every
	// package passed, for what the tests left in out/ (captures).
	Keep bool
	// Expose lists host directories the tests read besides their
	// modules: the workspace root, whose bin/ holds the binaries and
	// images the suites run. Like the modules, each is made visible at
	// its own path in the guest when the guest's /tmp hides it.
	Expose []string
	// HostNet gives the guest the host's network (BootOptions.HostNet),
	// brought up before the first package runs.
	HostNet bool
	// Forward lists host ports forwarded into the guest
	// (BootOptions.Forward); it needs HostNet.
	Forward []PortForward
	// Env is added to every test binary's environment, as KEY=VALUE.
	Env []string
	// Artifacts, if set, is a host directory that receives what the
	// tests wrote to the directory guest.ArtifactsEnv names (figures,
	// pictures), whether they passed or not: the guest's view of the host
	// tree is an overlay whose writes go with the guest.
	Artifacts string
}

// PackageResult is the outcome of one package's test binary.
type PackageResult struct {
	Package     TestPackage
	Passed      bool
	Ran         bool // the guest started the binary
	BuildFailed bool // go test -c failed; the compiler output went to Stdout
	Elapsed     time.Duration
}

// TestReport is the outcome of RunTests.
type TestReport struct {
	Packages []PackageResult
	Passed   int // top-level tests
	Failed   int
	Skipped  int
	// BootToFirstTest is from starting QEMU to the guest starting the
	// first test binary.
	BootToFirstTest time.Duration
	Boot            BootResult
	// Total, if set by the caller, is the whole run's wall time, printed
	// in the summary.
	Total time.Duration
}

// OK reports whether every package passed.
func (r *TestReport) OK() bool {
	for _, p := range r.Packages {
		if !p.Passed {
			return false
		}
	}
	return len(r.Packages) > 0
}

// envName is what a shell accepts as a variable's name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var topLevelResult = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): `)

// RunTests compiles each package's tests on the host (`go test -c -tags
// kernel`, GOWORK=off, in its module), boots one guest and runs every
// binary there as root with -test.v, in its package directory (the guest
// sees the host's tree), one after another. Output streams to o.Stdout. A
// VM failure is an error; failing tests are not (see TestReport.OK).
func (l *Lab) RunTests(ctx context.Context, pkgs []TestPackage, o TestOptions) (*TestReport, error) {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.PackageTimeout == 0 {
		o.PackageTimeout = 15 * time.Minute
	}
	if len(pkgs) == 0 {
		return nil, &Error{Op: "run tests", Err: fmt.Errorf("no packages with %s-tagged tests", KernelTag)}
	}
	if o.HostNet && o.Peer != nil {
		return nil, &Error{Op: "run tests", Err: errors.New("a two-guest run has no host network")}
	}
	if len(o.Forward) > 0 && !o.HostNet {
		return nil, &Error{Op: "run tests", Err: errors.New("port forwards need the host's network (HostNet)")}
	}
	for _, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || !envName.MatchString(k) {
			return nil, &Error{Op: "run tests", Err: fmt.Errorf("environment entry %q is not NAME=VALUE", kv)}
		}
	}
	run, err := l.NewRun()
	if err != nil {
		return nil, err
	}
	// Like go test, a package that does not build fails on its own and
	// the others still run.
	rep := &TestReport{}
	bins := make([]string, len(pkgs))
	built := 0
	c := &commander{log: o.Log}
	for i, p := range pkgs {
		rep.Packages = append(rep.Packages, PackageResult{Package: p})
		bin := filepath.Join(run.Dir, "bin", fmt.Sprintf("%02d-%s.test", i, sanitize(strings.ReplaceAll(p.Rel, "/", "-"))))
		fmt.Fprintf(o.Log, "pillar-lab: go test -c -tags %s %s\n", KernelTag, p.ImportPath)
		_, err := c.run(ctx, "compile tests", cmdOpts{dir: p.ModuleDir, timeout: 15 * time.Minute, env: []string{"GOWORK=off"}},
			"go", "test", "-c", "-tags", KernelTag, "-o", bin, p.ImportPath)
		if ctx.Err() != nil {
			run.Remove()
			return nil, &Error{Op: "compile tests", Path: p.ImportPath, Err: ctx.Err()}
		}
		if err != nil {
			fmt.Fprintf(o.Stdout, "%v\n", err)
			rep.Packages[i].BuildFailed = true
			continue
		}
		bins[i] = bin
		built++
	}
	if built == 0 {
		run.Remove()
		rep.Failed = len(pkgs)
		return rep, nil
	}

	// Everything the tests read from the host tree: their modules and
	// what the caller names (a checkout under /tmp is hidden otherwise).
	mods := slices.Clone(o.Expose)
	for _, p := range pkgs {
		mods = append(mods, p.ModuleDir)
	}
	vm := o.VM
	var pr *pair
	if o.Peer != nil {
		first := 0
		for bins[first] == "" {
			first++
		}
		script := exposeScript(mods) + fmt.Sprintf("cd %s && exec %s -test.v\n", shellQuote(pkgs[first].Dir), shellQuote(bins[first]))
		if pr, err = l.newPair(run, o.Peer, script, o.Stdout); err != nil {
			run.Remove()
			return nil, err
		}
		vm.KernelArgs = append(append([]string(nil), vm.KernelArgs...), guest.RoleParam+"="+guest.RoleMain)
	}

	var s strings.Builder
	s.WriteString("#!/bin/sh\n")
	s.WriteString(guestEnv)
	for _, kv := range o.Env {
		k, v, _ := strings.Cut(kv, "=")
		s.WriteString("export " + k + "=" + shellQuote(v) + "\n")
	}
	if o.HostNet {
		s.WriteString(HostNetScript)
	}
	if pr != nil {
		s.WriteString(shareMount)
	}
	s.WriteString(`out=` + shellQuote(run.OutDir()) + `
mkdir -p "$out/artifacts" && export ` + guest.ArtifactsEnv + `="$out/artifacts"
rc=0
uptime() { cut -d' ' -f1 /proc/uptime; }
runpkg() {
	i=$1; dir=$2; bin=$3; shift 3
	echo "pillar-lab: === package $i start"
	start=$(uptime)
	(cd "$dir" && exec "$bin" "$@")
	st=$?
	echo "$st $start $(uptime)" > "$out/result-$i"
	[ "$st" -eq 0 ] || rc=1
}
`)
	s.WriteString(exposeScript(mods))
	args := []string{"-test.v", "-test.timeout=" + o.PackageTimeout.String()}
	args = append(args, o.TestArgs...)
	for i, p := range pkgs {
		if bins[i] == "" {
			continue
		}
		fmt.Fprintf(&s, "runpkg %d %s %s", i, shellQuote(p.Dir), shellQuote(bins[i]))
		for _, a := range args {
			s.WriteString(" " + shellQuote(a))
		}
		s.WriteString("\n")
	}
	s.WriteString("exit $rc\n")

	bootStart := time.Now()
	cur := -1
	fails := make([]int, len(pkgs)) // top-level FAIL lines per package
	onLine := func(line string) {
		if rest, ok := strings.CutPrefix(line, "pillar-lab: === package "); ok {
			if rep.BootToFirstTest == 0 {
				rep.BootToFirstTest = time.Since(bootStart)
			}
			if n, err := strconv.Atoi(strings.Fields(rest + " x")[0]); err == nil && n >= 0 && n < len(pkgs) {
				cur = n
			}
		}
		if m := topLevelResult.FindStringSubmatch(line); m != nil {
			switch m[1] {
			case "PASS":
				rep.Passed++
			case "FAIL":
				rep.Failed++
				if cur >= 0 {
					fails[cur]++
				}
			case "SKIP":
				rep.Skipped++
			}
		}
	}
	bo := BootOptions{VM: vm, Script: s.String(), Stdout: o.Stdout, OnLine: onLine, HostNet: o.HostNet, Forward: o.Forward}
	if pr != nil {
		bo.Link, bo.Share = pr.main, pr.share
		pr.start(ctx)
	}
	res, err := run.Boot(ctx, bo)
	if pr != nil {
		pr.close()
	}
	rep.Boot = res
	if o.Artifacts != "" {
		if n, cerr := copyTree(filepath.Join(run.OutDir(), "artifacts"), o.Artifacts); cerr != nil {
			fmt.Fprintf(o.Log, "pillar-lab: artifacts: %v\n", cerr)
			rep.Failed++
		} else if n > 0 {
			fmt.Fprintf(o.Log, "pillar-lab: %d artifacts in %s\n", n, o.Artifacts)
		}
	}
	for i := range pkgs {
		pr := &rep.Packages[i]
		if b, rerr := os.ReadFile(filepath.Join(run.OutDir(), fmt.Sprintf("result-%d", i))); rerr == nil {
			f := strings.Fields(string(b))
			if len(f) == 3 {
				st, _ := strconv.Atoi(f[0])
				t0, _ := strconv.ParseFloat(f[1], 64)
				t1, _ := strconv.ParseFloat(f[2], 64)
				pr.Ran, pr.Passed = true, st == 0
				pr.Elapsed = time.Duration((t1 - t0) * float64(time.Second))
			}
		}
		// A package that failed without a failing test (it did not build,
		// crashed in TestMain, or never ran) still counts as one failure,
		// so the closing line never reads "0 failed" for a failed run.
		if !pr.Passed && fails[i] == 0 {
			rep.Failed++
		}
	}
	if err != nil {
		fmt.Fprintf(o.Log, "pillar-lab: run directory kept: %s\n", run.Dir)
		if pr != nil {
			fmt.Fprintf(o.Log, "pillar-lab: the peer's run directory kept: %s\n", pr.run.Dir)
		}
		return rep, err
	}
	if rep.OK() && !o.Keep {
		run.Remove()
		if pr != nil {
			pr.run.Remove()
		}
	} else {
		fmt.Fprintf(o.Log, "pillar-lab: run directory kept (console.log, out/dmesg.txt): %s\n", run.Dir)
		if pr != nil {
			fmt.Fprintf(o.Log, "pillar-lab: the peer's run directory kept: %s\n", pr.run.Dir)
		}
	}
	return rep, nil
}

// WriteSummary prints one go-test-style line per package and a closing
// total, the way `go test` ends.
func (r *TestReport) WriteSummary(w io.Writer) {
	for _, p := range r.Packages {
		switch {
		case p.Passed:
			fmt.Fprintf(w, "ok  \t%s\t%.3fs\n", p.Package.ImportPath, p.Elapsed.Seconds())
		case p.Ran:
			fmt.Fprintf(w, "FAIL\t%s\t%.3fs\n", p.Package.ImportPath, p.Elapsed.Seconds())
		case p.BuildFailed:
			fmt.Fprintf(w, "FAIL\t%s [build failed]\n", p.Package.ImportPath)
		default:
			fmt.Fprintf(w, "FAIL\t%s [did not run]\n", p.Package.ImportPath)
		}
	}
	fmt.Fprintf(w, "kernel-lab: boot to first test %.1fs, VM %.1fs", r.BootToFirstTest.Seconds(), r.Boot.Elapsed.Seconds())
	if r.Total > 0 {
		fmt.Fprintf(w, ", total %.1fs", r.Total.Seconds())
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "kernel-lab: %d passed, %d failed, %d skipped\n", r.Passed, r.Failed, r.Skipped)
}

// copyTree copies the regular files under src to the same paths under
// dst, creating directories as needed, and returns how many it copied. A
// missing src copies nothing.
func copyTree(src, dst string) (int, error) {
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == src && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, b, 0o644); err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}
