//go:build kernel

package pillar_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
)

// externalCISpecs is the subset of the Kubernetes external-storage suite
// that TestExternalStorage runs by default (make e2e-ci): claims of the
// driver file that no pillar-csi test checks the same way, online
// expansion and ReadWriteOncePod. Each spec took
// 190-225 s in a TCG guest on a slow CI day (70-80 s on a fast one); the
// other specs of the default, xfs and block volume patterns, expansion
// offline, exec, multipods, snapshots and clones, run in make e2e-full
// with the rest of the suite. Each entry
// is the rest of a spec's full text after "External Storage [Driver:
// pillar-csi.io] ", matched literally and to the end (the tags such as
// [Slow] are part of the text). `bin/e2e.test
// -storage.testdriver=... -ginkgo.dry-run -ginkgo.v
// -ginkgo.focus=External.Storage` lists the whole set.
var externalCISpecs = []string{
	// Expansion of a volume in use by a pod: ControllerExpandVolume, then
	// NodeExpandVolume growing the mounted filesystem.
	"[Testpattern: Dynamic PV (default fs)(allowExpansion)] volume-expand should resize volume when PVC is edited while pod is using it",
	// ReadWriteOncePod: a second pod on the same node is kept out.
	"[Testpattern: Dynamic PV (default fs)] read-write-once-pod should block a second pod from using an in-use ReadWriteOncePod volume on the same node",
}

// externalDefaultSkip leaves out the specs this lab cannot run in any
// selection: [Disruptive] ones reach the nodes over SSH (kubelet restarts,
// network cuts), which the lab's node does not serve; [Flaky] ones are
// what upstream's own runs leave out.
const externalDefaultSkip = `\[Disruptive\]|\[Flaky\]`

// The selection of TestExternalStorage, as Ginkgo regular expressions over
// the specs' full text. The defaults are the CI subset; make e2e-full
// widens them, e.g. -external.focus=External.Storage.
var (
	externalFocus   = flag.String("external.focus", ciFocus(), "Ginkgo focus of TestExternalStorage (regular expression over the spec text); the default is the CI subset")
	externalSkip    = flag.String("external.skip", externalDefaultSkip, "Ginkgo skip of TestExternalStorage (regular expression over the spec text)")
	externalTimeout = flag.Duration("external.timeout", 30*time.Minute, "Time limit of the e2e.test run of TestExternalStorage (its -ginkgo.timeout)")
	externalRWX     = flag.Bool("external.rwx", false, "TestExternalStorage: run the suite on a class that consents to writers on several nodes (rwxClass) with the driver file's RWX capability, so that its ReadWriteMany Block spec runs (make e2e-full-4)")
)

// rwxFilesystemSpecs are the ReadWriteMany specs of filesystem patterns,
// which -external.rwx leaves out: pillar-csi refuses a filesystem with
// writers on several nodes in every class (ext4 and xfs mounted on two
// nodes at once corrupt each other's metadata; docs/rwx-block.md), and
// the suite has no way to say that it serves ReadWriteMany for Block
// alone.
const rwxFilesystemSpecs = `\((filesystem volmode|default fs|ext4|xfs|ntfs)\)\] multiVolume .*should concurrently access the single volume from pods on different node`

// ciFocus is externalCISpecs as one focus expression. Every spec text
// starts with "External Storage [Driver: pillar-csi.io]", so the focus
// cannot pick up another driver's or another suite's spec of the same
// name.
func ciFocus() string {
	alts := make([]string, len(externalCISpecs))
	for i, s := range externalCISpecs {
		alts[i] = regexp.QuoteMeta(s) + "$"
	}
	return regexp.QuoteMeta("External Storage [Driver: pillar-csi.io] ") + "(" + strings.Join(alts, "|") + ")"
}

// TestExternalStorage runs Kubernetes' own storage e2e suite
// (bin/e2e.test, make e2e-test-binary) against pillar-csi as installed by
// the chart, with the driver file testdata/external-driver.yaml: the
// checks every CSI driver is held to, as upstream wrote them. It fails
// when a spec fails and when the selection ran nothing, and it logs every
// skipped spec with the suite's reason.
func TestExternalStorage(t *testing.T) {
	c := setup(t)
	ci := *externalFocus == ciFocus()
	driverFile, skip := filepath.Join(lab.root, "tests", "e2e", "pillar", "testdata", "external-driver.yaml"), *externalSkip
	if *externalRWX {
		driverFile = rwxDriverFile(t, c, driverFile)
		skip += "|" + rwxFilesystemSpecs
		t.Logf("ReadWriteMany on %s; not selected, because pillar-csi refuses a filesystem on several nodes: %s", rwxClass, rwxFilesystemSpecs)
	}
	res := runExternal(t, c, externalRun{
		driverFile: driverFile,
		focus:      *externalFocus,
		skip:       skip,
		timeout:    *externalTimeout,
		agnhost:    !ci,
	})
	if ci && len(res.selected) != len(externalCISpecs) {
		t.Fatalf("the CI subset names %d specs and the suite has %d of them:\n%s",
			len(externalCISpecs), len(res.selected), strings.Join(res.selected, "\n"))
	}
	for _, f := range res.failed {
		t.Errorf("failed: %s\n%s", f.name, f.reason)
	}
	// Each spec of the CI subset stands for a capability the driver file
	// claims: one that skips itself means the claim did not reach the
	// suite (a misspelt key is ignored, not refused).
	if ci && len(res.skipped) > 0 {
		t.Errorf("%d specs of the CI subset skipped themselves; each must run", len(res.skipped))
	}
	if len(res.passed) == 0 && len(res.failed) == 0 {
		t.Errorf("no spec ran: focus %q, skip %q selects nothing that the driver file supports", *externalFocus, *externalSkip)
	}
	if res.runErr != nil && len(res.failed) == 0 {
		t.Errorf("e2e.test: %v, though its report has no failed spec", res.runErr)
	}
}

// rwxDriverFile creates the consenting class rwxClass (removed when the
// test ends) and writes a copy of the driver file base that names it and
// claims the RWX capability; it returns the copy's path.
func rwxDriverFile(t *testing.T, c *cluster.Cluster, base string) string {
	t.Helper()
	applyRWXClass(t, c)
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]any
	if err := yaml.Unmarshal(b, &all); err != nil {
		t.Fatalf("%s: %v", base, err)
	}
	info, _ := all["DriverInfo"].(map[string]any)
	caps, ok := info["Capabilities"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no DriverInfo.Capabilities", base)
	}
	caps["RWX"] = true
	all["StorageClass"] = map[string]any{"FromExistingClassName": rwxClass}
	out, err := yaml.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "external-driver-rwx.yaml")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// externalRun is one run of the external-storage suite: the driver file,
// the Ginkgo selection, its time limit, and whether the agnhost image is
// needed (every selection but the CI subset).
type externalRun struct {
	driverFile, focus, skip string
	timeout                 time.Duration
	agnhost                 bool
}

// externalResult is what a run of the suite reported: the specs its dry
// run selected, its junit report, and e2e.test's own exit.
type externalResult struct {
	suiteResult
	selected []string
	runErr   error
	// log is the run's output, for what a spec logs (figures).
	log string
}

// runExternal runs Kubernetes' own storage e2e suite (bin/e2e.test, make
// e2e-test-binary) against the cluster with r's driver file and
// selection, and logs every spec that passed and every one skipped at run
// time with the suite's reason. It fails the test when the suite cannot
// run or writes no report; the caller judges the specs.
func runExternal(t *testing.T, c *cluster.Cluster, r externalRun) externalResult {
	t.Helper()
	bin := filepath.Join(lab.root, "bin")
	e2eTest := filepath.Join(bin, "e2e.test")
	if _, err := os.Stat(e2eTest); err != nil {
		t.Fatalf("the external-storage suite is not built (make e2e-test-binary): %v", err)
	}
	if _, err := os.Stat(r.driverFile); err != nil {
		t.Fatalf("driver file: %v", err)
	}
	env := append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	stubTestImages(t, c, e2eTest, env, r.agnhost)
	if c.PeerName != "" {
		// A two-guest run: the specs that need a second node (a pod
		// recreated on another node) get the storage node, which the
		// install cordoned; the other tests expect it cordoned again.
		kubectl(t, c, "uncordon", c.PeerName)
		t.Cleanup(func() { kubectl(t, c, "cordon", c.PeerName) })
	}

	out := t.TempDir()
	selection := []string{
		"-storage.testdriver=" + r.driverFile,
		"-ginkgo.focus=" + r.focus,
		"-ginkgo.skip=" + r.skip,
		"-ginkgo.no-color",
		"-kubeconfig=" + c.Kubeconfig,
	}

	// A dry run first, which takes seconds: a selection that matches no
	// spec fails here, and so does a CI subset that lost a spec because
	// upstream renamed it.
	var res externalResult
	res.selected = dryRun(t, env, e2eTest, selection, r, filepath.Join(out, "dry-run.xml"))
	t.Logf("external-storage suite: %d specs selected", len(res.selected))

	junit := filepath.Join(out, "junit.xml")
	args := append(slices.Clone(selection),
		"-ginkgo.v",
		"-ginkgo.junit-report="+junit,
		"-ginkgo.timeout="+r.timeout.String(),
		"-report-dir="+filepath.Join(out, "report"),
		"-e2e-output-dir="+filepath.Join(out, "output"),
		// No cloud provider: the specs that need one (or SSH to the
		// nodes) skip themselves instead of failing to reach it.
		"-provider=skeleton",
		"-kubectl-path="+filepath.Join(bin, "kubectl"),
	)
	t.Logf("$ %s %s", e2eTest, strings.Join(args, " "))

	// Ginkgo stops at -ginkgo.timeout and reports; the extra time is for
	// the cleanup of the spec it interrupted and for the report itself.
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout+5*time.Minute)
	defer cancel()
	// The cluster's warnings as they happen, next to the spec that caused
	// them: a spec that fails by timing out (a pod never Running) logs
	// only "not Running", and its namespace's events are gone with it.
	events, stopEvents := context.WithCancel(ctx)
	eventsDone := make(chan struct{})
	go func() {
		defer close(eventsDone)
		_ = runLines(events, env, os.Stdout, "event: ", filepath.Join(bin, "kubectl"), "get", "events", "-A", "--watch-only",
			"--field-selector=type=Warning", "-o", "custom-columns=NAMESPACE:.metadata.namespace,OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message", "--no-headers")
	}()
	defer func() { stopEvents(); <-eventsDone }()
	t0 := time.Now()
	var log strings.Builder
	res.runErr = runLines(ctx, env, io.MultiWriter(os.Stdout, &log), "e2e.test: ", e2eTest, args...)
	res.log = log.String()
	record(t, "external-storage suite", time.Since(t0))

	jr, err := readJUnit(junit)
	if err != nil {
		t.Fatalf("e2e.test wrote no readable report (exit: %v): %v", res.runErr, err)
	}
	res.suiteResult = jr
	t.Logf("external-storage suite: %d passed, %d failed, %d skipped at run time, %d not selected, in %.0fs",
		len(res.passed), len(res.failed), len(res.skipped), res.unselected, time.Since(t0).Seconds())
	for _, name := range res.passed {
		t.Logf("passed: %s", name)
	}
	for _, s := range res.skipped {
		t.Logf("skipped: %s\n    because: %s", s.name, s.reason)
	}
	return res
}

// stubTestImages imports, under the names of the suite's busybox and
// nginx test images, the harness's busybox image (every applet of the
// host's static busybox linked at its path), and under the name of
// glibc-dns-testing (the glibc image the multiVolume specs' pods run) the
// same with the host's GNU dd and the libraries it loads, so that the
// specs' pods start without a registry. The storage specs run their own
// commands in busybox (echo, cat, head, dd, test, ls, grep, sleep), some
// by exec without a shell; the exec spec runs /bin/sh in an nginx image
// only because it has one. With withAgnhost it also imports, under the
// agnhost image's name, bin/agnhost (make agnhost, built from the suite's
// own release) over the same applets: the subPath specs run agnhost's
// mounttest, and the host-exec pods of the volumeMode and subPath specs
// run agnhost pause and then nsenter and sh. The references come from the
// binary (-list-images), so they follow the release it was built from.
func stubTestImages(t *testing.T, c *cluster.Cluster, e2eTest string, env []string, withAgnhost bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2eTest, "-list-images")
	cmd.Env = env
	list, err := cmd.Output()
	if err != nil {
		t.Fatalf("e2e.test -list-images: %v", err)
	}
	var refs, glibcRefs, agnhostRefs []string
	for _, ref := range strings.Fields(string(list)) {
		switch imageName(ref) {
		case "busybox", "nginx":
			refs = append(refs, ref)
		case "glibc-dns-testing":
			glibcRefs = append(glibcRefs, ref)
		case "agnhost":
			// Not the copy in a registry that requires credentials,
			// which specs of other suites expect to fail to pull.
			if strings.Contains(ref, "/e2e-test-images/") {
				agnhostRefs = append(agnhostRefs, ref)
			}
		}
	}
	if len(refs) == 0 || len(glibcRefs) == 0 {
		t.Fatalf("e2e.test -list-images names no busybox, nginx or glibc-dns-testing image:\n%s", list)
	}
	if err := c.ImportBusybox(ctx, refs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("test images served by the host's busybox: %s", strings.Join(refs, " "))
	if err := c.ImportBusyboxWithTools(ctx, cluster.GlibcStandInTools, glibcRefs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("test images served by the host's busybox with %v: %s", cluster.GlibcStandInTools, strings.Join(glibcRefs, " "))
	if !withAgnhost {
		return
	}
	agnhost := filepath.Join(lab.root, "bin", "agnhost")
	if _, err := os.Stat(agnhost); err != nil {
		t.Fatalf("agnhost is not built (make agnhost): %v", err)
	}
	if len(agnhostRefs) == 0 {
		t.Fatalf("e2e.test -list-images names no agnhost image:\n%s", list)
	}
	if err := c.ImportAgnhost(ctx, agnhost, agnhostRefs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("agnhost images served by bin/agnhost: %s", strings.Join(agnhostRefs, " "))
}

// imageName is the last path element of an image reference, without its
// tag: "busybox" for registry.k8s.io/e2e-test-images/busybox:1.37.0-2.
func imageName(ref string) string {
	name := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.IndexAny(name, ":@"); i >= 0 {
		name = name[:i]
	}
	return name
}

// dryRun runs e2e.test with -ginkgo.dry-run and the selection args and
// returns the specs it would run (a dry run reports each as passed). It
// fails the test when the selection matches no spec.
func dryRun(t *testing.T, env []string, e2eTest string, selection []string, r externalRun, junit string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log bytes.Buffer
	args := append(slices.Clone(selection), "-ginkgo.dry-run", "-ginkgo.junit-report="+junit)
	err := runLines(ctx, env, &log, "", e2eTest, args...)
	res, rerr := readJUnit(junit)
	if err != nil || rerr != nil {
		t.Fatalf("e2e.test dry run: %v, report: %v\n%s", err, rerr, log.String())
	}
	if len(res.passed) == 0 {
		t.Fatalf("focus %q and skip %q select no spec of the suite\n%s", r.focus, r.skip, log.String())
	}
	return res.passed
}

// runLines runs name with args and env, copying its output line by line
// to w, each line after prefix, as it comes (a run takes many minutes);
// it runs in a process group of its own, killed as a whole when ctx ends.
func runLines(ctx context.Context, env []string, w io.Writer, prefix, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			fmt.Fprintf(w, "%s%s\n", prefix, sc.Text())
		}
		// Keep draining, so that the process never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w (%w)", name, ctx.Err(), err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// junitReport is the part of Ginkgo's JUnit report
// (github.com/onsi/ginkgo/v2/reporters) that the test reads.
type junitReport struct {
	Suites []struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Status  string `xml:"status,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

type specResult struct{ name, reason string }

type suiteResult struct {
	// passed and skipped hold specs ("[It] ..."); failed holds specs and
	// the suite's setup and report nodes.
	passed          []string
	failed, skipped []specResult
	// unselected counts the specs the focus and skip left out: Ginkgo
	// reports them as skipped with no reason.
	unselected int
}

// readJUnit sorts the report's specs into passed, failed, skipped at run
// time (the spec called Skip, with its reason: a capability the driver
// file does not claim, too few nodes) and not selected. The suite's setup
// and report nodes ("[SynchronizedBeforeSuite]", "[ReportAfterSuite] ...")
// count only when they fail: a suite whose setup passed and whose
// selection ran no spec has passed nothing.
func readJUnit(path string) (suiteResult, error) {
	var r suiteResult
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	var rep junitReport
	if err := xml.Unmarshal(b, &rep); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range rep.Suites {
		for _, tc := range s.Cases {
			spec := strings.HasPrefix(tc.Name, "[It] ")
			switch tc.Status {
			case "passed":
				if spec {
					r.passed = append(r.passed, tc.Name)
				}
			case "skipped":
				msg := ""
				if tc.Skipped != nil {
					msg = tc.Skipped.Message
				}
				reason, ok := strings.CutPrefix(msg, "skipped - ")
				if !spec || !ok {
					r.unselected++
					continue
				}
				r.skipped = append(r.skipped, specResult{tc.Name, strings.TrimSpace(reason)})
			case "pending":
				r.unselected++
			default: // failed, timedout, interrupted, aborted, panicked
				why := tc.Status
				switch {
				case tc.Failure != nil:
					why += ": " + strings.TrimSpace(tc.Failure.Message+"\n"+tc.Failure.Text)
				case tc.Error != nil:
					why += ": " + strings.TrimSpace(tc.Error.Message+"\n"+tc.Error.Text)
				}
				r.failed = append(r.failed, specResult{tc.Name, why})
			}
		}
	}
	if len(rep.Suites) == 0 {
		return r, errors.New(path + ": no test suite in the report")
	}
	sort.Strings(r.passed)
	return r, nil
}

// TestReadJUnit checks the sorting of a report like the ones e2e.test
// writes (Ginkgo v2's JUnit format): a spec that was not selected is not a
// skip, a passed setup node is not a passed spec, and a failed one is a
// failure. It needs no guest.
func TestReadJUnit(t *testing.T) {
	const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="2" errors="0" failures="2" time="12.5">
  <testsuite name="Kubernetes external storage e2e suite" package="/" tests="6" disabled="0" skipped="2" errors="0" failures="2" time="12.5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes external storage e2e suite" status="passed" time="0.1"></testcase>
    <testcase name="[It] External Storage [Driver: pillar-csi.io] [Testpattern: Dynamic PV (default fs)] volumes should store data [Driver: pillar-csi.io]" classname="Kubernetes external storage e2e suite" status="passed" time="9"></testcase>
    <testcase name="[It] External Storage [Driver: pillar-csi.io] [Testpattern: Dynamic PV (default fs)] volumes should allow exec of files on the volume [Driver: pillar-csi.io]" classname="Kubernetes external storage e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] External Storage [Driver: pillar-csi.io] [Testpattern: Dynamic PV (default fs)] provisioning should provision storage with pvc data source [Driver: pillar-csi.io]" classname="Kubernetes external storage e2e suite" status="skipped" time="0.2">
      <skipped message="skipped - Driver &#34;pillar-csi.io&#34; does not support cloning - skipping"></skipped>
    </testcase>
    <testcase name="[It] External Storage [Driver: pillar-csi.io] [Testpattern: Dynamic PV (block volmode)] volumes should store data [Driver: pillar-csi.io]" classname="Kubernetes external storage e2e suite" status="failed" time="3">
      <failure message="" type="failed">[FAILED] timed out waiting for the condition</failure>
    </testcase>
    <testcase name="[ReportAfterSuite] Autogenerated ReportAfterSuite for --junit-report" classname="Kubernetes external storage e2e suite" status="timedout" time="0">
      <failure message="report" type="timedout">took too long</failure>
    </testcase>
  </testsuite>
</testsuites>`
	path := filepath.Join(t.TempDir(), "junit.xml")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := readJUnit(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.passed) != 1 || !strings.Contains(r.passed[0], "(default fs)] volumes should store data") {
		t.Errorf("passed = %q, want the one spec that passed", r.passed)
	}
	if r.unselected != 1 {
		t.Errorf("unselected = %d, want 1", r.unselected)
	}
	if len(r.skipped) != 1 || r.skipped[0].reason != `Driver "pillar-csi.io" does not support cloning - skipping` {
		t.Errorf("skipped = %+v, want the pvc data source spec with its reason", r.skipped)
	}
	if len(r.failed) != 2 || !strings.Contains(r.failed[0].reason, "timed out waiting") || !strings.HasPrefix(r.failed[1].reason, "timedout: report") {
		t.Errorf("failed = %+v, want the block spec and the report node", r.failed)
	}
	if _, err := readJUnit(filepath.Join(t.TempDir(), "missing.xml")); err == nil {
		t.Error("a missing report read without an error")
	}
}
