//go:build kernel

package pillar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/e2e/perfplot"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// What TestPerformance runs; make e2e-perf runs the defaults.
var (
	perfSequential = flag.Int("perf.sequential", 20, "TestPerformance: claims bound and pods started one after another, per driver")
	perfBursts     = flag.String("perf.bursts", "50,100", "TestPerformance: sizes of the bursts of claims without pods, comma-separated")
	perfPods       = flag.Int("perf.pods", 50, "TestPerformance: claims with their pods created at once (0: none)")
	perfDrivers    = flag.String("perf.drivers", "pillar-csi,floor,local-path", "TestPerformance: the drivers measured, comma-separated, of pillar-csi, floor, local-path")
)

// Claim sizes are small on purpose: TestPerformance measures the
// drivers' and the cluster's steps, not mkfs on large devices. A burst of
// claims without pods is formatted by no one; 100 of them and 50 with
// pods each fit the lab's 4 GiB pool.
const (
	perfClaimSize = "32Mi"
	perfBurstSize = "16Mi"
)

// perfDir is where TestPerformance writes perf.md (the table) and
// perf.svg (the picture): the run's artifacts, which make e2e-perf has
// pillar-lab copy to bin/perf on the host, or bin/perf of the tree the
// test runs in.
func perfDir() string {
	if d := os.Getenv(guest.ArtifactsEnv); d != "" {
		return d
	}
	return filepath.Join(lab.root, "bin", "perf")
}

// perfPodScript writes a little through the volume, so that a Running pod
// has a filesystem that works, and stays up.
const perfPodScript = `set -e; echo ok > /data/ok; sync; sleep 3600`

// perfDriver is a driver TestPerformance measures: its name in the
// results and the StorageClass its claims use (each binds Immediate).
type perfDriver struct{ name, class string }

var perfAll = []perfDriver{{"pillar-csi", "zfs-nvmeof"}, {"floor", floorClass}, {"local-path", localPathClass}}

// perfResult is one driver's figures in one part of TestPerformance.
type perfResult struct {
	part, driver string
	n            int
	bound        []time.Duration // each claim created → Bound
	running      []time.Duration // each pod created → Running
	deleted      time.Duration   // claims deleted → every PV gone
	warnings     int             // Warning events in the namespace
}

// TestPerformance measures what a user waits for, for pillar-csi and,
// in the same cluster boot and in turns, for the floor driver and
// local-path-provisioner (floor_test.go), the cluster's own cost and the
// provisioner many small clusters use:
//
//   - one after another (-perf.sequential, default 20): a claim created →
//     Bound, then a pod using it created → Running; p50 and p99 of each;
//     a pod with a hostPath volume created → Running is the pods' baseline;
//   - bursts of claims without pods (-perf.bursts, default 50 and 100),
//     all in one kubectl apply: the time until each is Bound;
//   - a burst of claims with their pods (-perf.pods, default 50): the time
//     until each claim is Bound and each pod Running, against as many
//     hostPath pods at once;
//   - after each part, the claims deleted: the time until every
//     PersistentVolume is gone; no zvol may be left.
//
// Nothing may fail: a failed pod fails the test, and each part counts
// the Warning events of its namespace. The times are taken the way the
// other tests take them (kubectl wait and 2 s polls from inside the
// guest), so they include kubectl's own start. The table of every figure,
// with each driver's ratio to the floor's, goes to the log and to
// bin/perf/perf.md, the picture of the bursts to bin/perf/*.svg.
func TestPerformance(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	before, err := zvolList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var drivers []perfDriver
	for _, name := range strings.Split(*perfDrivers, ",") {
		i := slices.IndexFunc(perfAll, func(d perfDriver) bool { return d.name == name })
		if i < 0 {
			t.Fatalf("-perf.drivers: unknown driver %q", name)
		}
		drivers = append(drivers, perfAll[i])
	}
	var bursts []int
	for _, f := range strings.Split(*perfBursts, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			t.Fatalf("-perf.bursts: %q is not a count", f)
		}
		bursts = append(bursts, n)
	}
	for _, d := range drivers {
		switch d.name {
		case "floor":
			installFloor(t, c)
		case "local-path":
			installLocalPath(t, c)
		}
	}
	var results []perfResult
	keep := func(r perfResult) {
		results = append(results, r)
		t.Logf("measured: %s", r)
	}
	defer func() { writePerf(t, results) }()

	if n := *perfSequential; n > 0 {
		t.Run("sequential", func(t *testing.T) {
			ns := testNamespace(t, c)
			dir := hostPathDir(t)
			var baseline []time.Duration
			for i := range n {
				t0 := time.Now()
				apply(t, c, pod(ns, fmt.Sprintf("hostpath-%02d", i), perfPodScript, fmt.Sprintf("hostPath: {path: %s, type: Directory}", dir), false))
				wait(t, c, ns, fmt.Sprintf("pod/hostpath-%02d", i), "condition=Ready", 5*time.Minute)
				baseline = append(baseline, time.Since(t0))
			}
			deletePods(t, c, ns)
			keep(perfResult{part: fmt.Sprintf("%d one after another", n), driver: "hostPath pod", n: n, running: baseline})
			for _, d := range drivers {
				r := perfResult{part: fmt.Sprintf("%d one after another", n), driver: d.name, n: n}
				for i := range n {
					name := fmt.Sprintf("%s-%02d", d.name, i)
					t0 := time.Now()
					apply(t, c, claim(ns, name, d.class, "Filesystem", "ReadWriteOnce", perfClaimSize))
					wait(t, c, ns, "pvc/"+name, "jsonpath={.status.phase}=Bound", 5*time.Minute)
					r.bound = append(r.bound, time.Since(t0))
					t1 := time.Now()
					apply(t, c, pod(ns, "pod-"+name, perfPodScript, fmt.Sprintf("persistentVolumeClaim: {claimName: %s}", name), false))
					wait(t, c, ns, "pod/pod-"+name, "condition=Ready", 5*time.Minute)
					r.running = append(r.running, time.Since(t1))
				}
				r.warnings = warningEvents(t, c, ns)
				r.deleted = deleteAll(t, c, ns, n, before)
				keep(r)
			}
		})
	}

	for _, n := range bursts {
		t.Run(fmt.Sprintf("claims-%d", n), func(t *testing.T) {
			for _, d := range drivers {
				// A subtest each: its namespace is named after it.
				t.Run(d.name, func(t *testing.T) {
					ns := testNamespace(t, c)
					t0 := time.Now()
					bound := claimBurst(t, c, ns, n, d.class)
					r := perfResult{part: fmt.Sprintf("%d claims at once", n), driver: d.name, n: n, bound: bound, warnings: warningEvents(t, c, ns)}
					if d.name == "pillar-csi" {
						logWhereTimeWent(t, c, ns, t0)
					}
					r.deleted = deleteAll(t, c, ns, n, before)
					keep(r)
				})
			}
		})
	}

	if n := *perfPods; n > 0 {
		t.Run(fmt.Sprintf("pods-%d", n), func(t *testing.T) {
			ns := testNamespace(t, c)
			dir := hostPathDir(t)
			var base strings.Builder
			for i := range n {
				fmt.Fprintf(&base, "---\n%s", pod(ns, fmt.Sprintf("hostpath-%03d", i), perfPodScript, fmt.Sprintf("hostPath: {path: %s, type: Directory}", dir), false))
			}
			t0 := time.Now()
			applyWithin(t, c, burstApplyTimeout, base.String())
			baseline := waitAll(t, c, ns, n, t0, 20*time.Minute, phaseWait{"pods", "hostpath-", "Running"})[0]
			deletePods(t, c, ns)
			keep(perfResult{part: fmt.Sprintf("%d claims and pods at once", n), driver: "hostPath pod", n: n, running: baseline})
			for _, d := range drivers {
				t.Run(d.name, func(t *testing.T) {
					ns := testNamespace(t, c)
					var all strings.Builder
					for i := range n {
						name := fmt.Sprintf("data-%03d", i)
						fmt.Fprintf(&all, "---\n%s---\n%s", claim(ns, name, d.class, "Filesystem", "ReadWriteOnce", perfClaimSize),
							pod(ns, "pod-"+name, perfPodScript, fmt.Sprintf("persistentVolumeClaim: {claimName: %s}", name), false))
					}
					t1 := time.Now()
					applyWithin(t, c, burstApplyTimeout, all.String())
					// One poll watches both, so that a pod Running before the
					// last claim is Bound is timed when it is.
					got := waitAll(t, c, ns, n, t1, 30*time.Minute, phaseWait{"pvc", "data-", "Bound"}, phaseWait{"pods", "pod-data-", "Running"})
					r := perfResult{part: fmt.Sprintf("%d claims and pods at once", n), driver: d.name, n: n, bound: got[0], running: got[1], warnings: warningEvents(t, c, ns)}
					if d.name == "pillar-csi" {
						logWhereTimeWent(t, c, ns, t1)
					}
					r.deleted = deleteAll(t, c, ns, n, before)
					keep(r)
				})
			}
		})
	}
}

// String is the result as one line of the log.
func (r perfResult) String() string {
	s := fmt.Sprintf("%s, %s:", r.part, r.driver)
	if len(r.bound) > 0 {
		s += fmt.Sprintf(" all Bound %.1fs (p50 %.1fs, p99 %.1fs);", slices.Max(r.bound).Seconds(), percentile(r.bound, 50).Seconds(), percentile(r.bound, 99).Seconds())
	}
	if len(r.running) > 0 {
		s += fmt.Sprintf(" all Running %.1fs (p50 %.1fs, p99 %.1fs);", slices.Max(r.running).Seconds(), percentile(r.running, 50).Seconds(), percentile(r.running, 99).Seconds())
	}
	if r.deleted > 0 {
		s += fmt.Sprintf(" deleted %.1fs;", r.deleted.Seconds())
	}
	return s + fmt.Sprintf(" %d Warning events", r.warnings)
}

// warningEvents is the number of Warning events in ns, repeats counted;
// when there are any, it logs them by reason and message.
func warningEvents(t *testing.T, c *cluster.Cluster, ns string) int {
	t.Helper()
	n := 0
	for _, f := range strings.Fields(kubectl(t, c, "get", "events", "-n", ns, "--field-selector", "type=Warning", "-o", "jsonpath={.items[*].count}")) {
		k, err := strconv.Atoi(f)
		n += max(k, 1)
		if err != nil {
			t.Logf("event count %q: %v", f, err)
		}
	}
	if n > 0 {
		logEventSummary(t, c, ns, "--field-selector", "type=Warning")
	}
	return n
}

// logWhereTimeWent logs, after a burst of pillar-csi's claims in ns
// that began at since, the namespace's events and then pillar-csi's side
// (logPillarSide).
func logWhereTimeWent(t *testing.T, c *cluster.Cluster, ns string, since time.Time) {
	t.Helper()
	logEventSummary(t, c, ns)
	logPillarSide(t, c, since)
}

// logPillarSide logs pillar-controller's CSI metrics, the agent's and the
// controller's errors and warnings since since, how long the agent's
// creates waited and ran, and the restarts of pillar-csi's containers.
func logPillarSide(t *testing.T, c *cluster.Cluster, since time.Time) {
	t.Helper()
	logControllerMetrics(t, c)
	agent := componentLogs(t, c, "agent", "pillar-agent", since)
	logErrors(t, "pillar-agent", agent, since)
	logErrors(t, "pillar-controller", componentLogs(t, c, "controller", "pillar-controller", since), since)
	logCreateTimes(t, agent, since)
	logRestarts(t, c)
}

// logCreateTimes logs, from pillar-agent's "volume created" records since
// since, how long the creates waited for a change slot of their store and
// how long the backend's creates took: average, p50 and the longest.
// logs is componentLogs' text of pillar-agent.
func logCreateTimes(t *testing.T, logs string, since time.Time) {
	t.Helper()
	var wait, create []time.Duration
	for _, l := range strings.Split(logs, "\n") {
		var r struct {
			Msg      string  `json:"msg"`
			SlotWait float64 `json:"slot_wait_seconds"`
			Create   float64 `json:"create_seconds"`
		}
		i := strings.IndexByte(l, '{') // after kubectl's [pod/…] prefix
		if i < 0 || json.Unmarshal([]byte(l[i:]), &r) != nil || r.Msg != "volume created" {
			continue
		}
		wait = append(wait, time.Duration(r.SlotWait*float64(time.Second)))
		create = append(create, time.Duration(r.Create*float64(time.Second)))
	}
	if len(create) == 0 {
		t.Logf("pillar-agent logged no volume created since %s", since.UTC().Format(time.TimeOnly))
		return
	}
	mean := func(ds []time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return sum / time.Duration(len(ds))
	}
	for _, f := range []struct {
		what string
		ds   []time.Duration
	}{{"waited for a change slot", wait}, {"backend create took", create}} {
		t.Logf("pillar-agent, %d volumes created: %s %.1fs on average (p50 %.1fs, longest %.1fs)",
			len(f.ds), f.what, mean(f.ds).Seconds(), percentile(f.ds, 50).Seconds(), slices.Max(f.ds).Seconds())
	}
}

// logRestarts logs each container of pillar-csi's pods that has
// restarted, why its last run ended and the end of that run's log: a
// burst whose calls fail with "connection reset by peer" or "use of
// closed network connection" lost a controller or agent on the way.
func logRestarts(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	out, err := c.Kubectl(context.Background(), nil, "get", "pods", "-n", deploy.Namespace, "-o",
		`jsonpath={range .items[*]}{.metadata.name}{"\t"}{range .status.containerStatuses[*]}{.name}={.restartCount}={.lastState.terminated.reason}={.lastState.terminated.exitCode}{" "}{end}{"\n"}{end}`)
	if err != nil {
		t.Logf("restarts in %s: %v", deploy.Namespace, err)
		return
	}
	restarted := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pod, containers, _ := strings.Cut(l, "\t")
		for _, f := range strings.Fields(containers) {
			parts := strings.Split(f, "=")
			if len(parts) != 4 || parts[1] == "0" {
				continue
			}
			restarted++
			prev, err := c.Kubectl(context.Background(), nil, "logs", "-n", deploy.Namespace, pod, "-c", parts[0], "--previous", "--tail=20")
			if err != nil {
				prev = []byte(err.Error())
			}
			t.Logf("%s/%s restarted %s times, its last run ended %s (exit code %s); its last lines:\n%s", pod, parts[0], parts[1], parts[2], parts[3], prev)
		}
	}
	if restarted == 0 {
		t.Logf("no container of %s restarted", deploy.Namespace)
	}
}

// hostPathDir is a directory on the node for the baseline pods.
func hostPathDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pillar-e2e-perf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// phaseWait names the objects waitAll waits for: those of kind whose
// names start with prefix, until they are in phase.
type phaseWait struct{ kind, prefix, phase string }

// waitAll polls, every 2 s and in one loop, each group of objects in ns
// until n objects of every group are in the group's phase, and returns,
// for each group, how long after since each object was first seen
// there. A pod that fails, or a timeout, fails the test with the phases
// last seen.
func waitAll(t *testing.T, c *cluster.Cluster, ns string, n int, since time.Time, timeout time.Duration, waits ...phaseWait) [][]time.Duration {
	t.Helper()
	seen := make([]map[string]time.Duration, len(waits))
	for i := range seen {
		seen[i] = map[string]time.Duration{}
	}
	poll(t, fmt.Sprintf("%d of each of %v in %s", n, waits, ns), timeout, 2*time.Second, func() (bool, string) {
		done, states := true, ""
		for i, w := range waits {
			out, err := c.Kubectl(context.Background(), nil, "get", w.kind, "-n", ns, "-o",
				`jsonpath={range .items[*]}{.metadata.name}{" "}{.status.phase}{"\n"}{end}`)
			if err != nil {
				return false, err.Error()
			}
			phases := map[string]int{}
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				name, p, _ := strings.Cut(l, " ")
				if !strings.HasPrefix(name, w.prefix) {
					continue
				}
				phases[p]++
				if p == "Failed" {
					logKubectl(t, c, "describe", w.kind, "-n", ns, name)
					t.Fatalf("%s/%s failed", w.kind, name)
				}
				if _, ok := seen[i][name]; !ok && p == w.phase {
					seen[i][name] = time.Since(since)
				}
			}
			done = done && len(seen[i]) == n
			states += fmt.Sprintf("%s %s: %d of %d, phases %v; ", w.kind, w.phase, len(seen[i]), n, phases)
		}
		return done, states
	})
	out := make([][]time.Duration, len(waits))
	for i := range waits {
		for _, d := range seen[i] {
			out[i] = append(out[i], d)
		}
	}
	return out
}

// claimBurst creates n claims of perfBurstSize, data-000 on, in ns in
// one kubectl apply, taking classes in turn, and returns how long after
// the apply each was Bound (waitAll's 2 s polls).
func claimBurst(t *testing.T, c *cluster.Cluster, ns string, n int, classes ...string) []time.Duration {
	t.Helper()
	var all strings.Builder
	for i := range n {
		fmt.Fprintf(&all, "---\n%s", claim(ns, fmt.Sprintf("data-%03d", i), classes[i%len(classes)], "Filesystem", "ReadWriteOnce", perfBurstSize))
	}
	t0 := time.Now()
	applyWithin(t, c, burstApplyTimeout, all.String())
	return waitAll(t, c, ns, n, t0, 30*time.Minute, phaseWait{"pvc", "data-", "Bound"})[0]
}

// objectNames matches what makes one object's event message differ from
// another's: volume IDs, UUIDs and host NQNs, kubelet's pod names and the
// test's claim and pod names (those of the bursts and of each driver's
// claims one after another).
var objectNames = regexp.MustCompile(`pvc-[0-9a-f-]{36}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"[a-z0-9-]+_[a-z0-9-]+\([^)]*\)"|(pod-)?(data|hostpath|pillar-csi|floor|local-path)-[0-9]+`)

// logEventSummary logs how many events of each reason the objects of ns
// got, with each distinct message (object names left out, cut at 400
// characters): where the time of a slow run went, in the words of the sidecars
// and the driver.
//
// filter is more of kubectl get's arguments, such as a field selector.
func logEventSummary(t *testing.T, c *cluster.Cluster, ns string, filter ...string) {
	t.Helper()
	args := append([]string{"get", "events", "-n", ns, "-o",
		`jsonpath={range .items[*]}{.reason}{"\t"}{.count}{"\t"}{.message}{"\n"}{end}`}, filter...)
	out, err := c.Kubectl(context.Background(), nil, args...)
	if err != nil {
		t.Logf("events of %s: %v", ns, err)
		return
	}
	counts := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(l, "\t", 3)
		if len(f) != 3 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n == 0 {
			n = 1
		}
		msg := objectNames.ReplaceAllString(f[2], "…")
		if r := []rune(msg); len(r) > 400 {
			msg = string(r[:400]) + "…"
		}
		counts[f[0]+": "+msg] += n
	}
	keys := slices.Sorted(maps.Keys(counts))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%6d  %s\n", counts[k], k)
	}
	t.Logf("events in %s by reason and message:\n%s", ns, b.String())
}

// logControllerMetrics logs, from the /metrics of each pillar-controller
// and pillar-agent pod, the count and total time of each CSI operation the
// controllers served and each agent call the agents served (a call's time
// at the agent includes its wait for a slot of the store), and the
// fencing rejections: where a burst's time went, between the controller,
// its record writes and the storage node.
func logControllerMetrics(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for _, m := range []struct {
		component string
		port      int
		prefixes  []string
	}{
		{"controller", 9430, []string{"pillar_controller_csi_operation_duration_seconds_count", "pillar_controller_csi_operation_duration_seconds_sum", "pillar_controller_fencing_rejections_total"}},
		{"agent", 9421, []string{"pillar_agent_rpc_duration_seconds_count", "pillar_agent_rpc_duration_seconds_sum", "pillar_agent_rpc_errors_total"}},
	} {
		pods := strings.Fields(kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component="+m.component, "-o", "jsonpath={.items[*].metadata.name}"))
		for _, p := range pods {
			out, err := c.Kubectl(context.Background(), nil, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy/metrics", deploy.Namespace, p, m.port))
			if err != nil {
				t.Logf("metrics of %s: %v", p, err)
				continue
			}
			var keep []string
			for _, l := range strings.Split(string(out), "\n") {
				if slices.ContainsFunc(m.prefixes, func(pre string) bool { return strings.HasPrefix(l, pre) }) {
					keep = append(keep, l)
				}
			}
			t.Logf("calls served by %s:\n%s", p, strings.Join(keep, "\n"))
		}
	}
}

// componentLogs is what component (pillar-csi's
// app.kubernetes.io/component: agent, controller) logged in its container
// since since, each line prefixed with its pod and container; "" when
// kubectl fails, which it logs.
func componentLogs(t *testing.T, c *cluster.Cluster, component, container string, since time.Time) string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), nil, "logs", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component="+component,
		"-c", container, "--prefix", "--tail=-1", "--since-time="+since.UTC().Format(time.RFC3339))
	if err != nil {
		t.Logf("logs of %s: %v", container, err)
		return ""
	}
	return string(out)
}

// logErrors logs the first errors and warnings in logs, what container
// logged since since (componentLogs): its own words for a failure that
// reaches the claims' events only as one line of a CSI error.
func logErrors(t *testing.T, container, logs string, since time.Time) {
	t.Helper()
	const most = 30
	var errs []string
	for _, l := range strings.Split(logs, "\n") {
		for _, level := range []string{"ERROR", "WARN"} {
			if strings.Contains(l, `"level":"`+level+`"`) || strings.Contains(l, "level="+level) {
				errs = append(errs, l)
			}
		}
	}
	n := len(errs)
	if n > most {
		errs = append(errs[:most], fmt.Sprintf("… and %d more", n-most))
	}
	t.Logf("%s logged %d errors and warnings since %s:\n%s", container, n, since.UTC().Format(time.TimeOnly), strings.Join(errs, "\n"))
}

// deleteAll deletes the test's pods and claims, returns how long until
// the n PersistentVolumes of the claims are gone, and checks that the
// pool holds the zvols it held before the test (want), no more.
func deleteAll(t *testing.T, c *cluster.Cluster, ns string, n int, want string) time.Duration {
	t.Helper()
	t0 := time.Now()
	deletePods(t, c, ns)
	kubectl(t, c, "delete", "pvc", "-n", ns, "--all", "--wait=false")
	poll(t, fmt.Sprintf("the %d PersistentVolumes of %s gone", n, ns), 30*time.Minute, 3*time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "get", "pv", "-o",
			`jsonpath={range .items[?(@.spec.claimRef.namespace=="`+ns+`")]}{.metadata.name}{"\n"}{end}`)
		left := strings.Fields(string(out))
		return err == nil && len(left) == 0, fmt.Sprintf("%d left %v", len(left), err)
	})
	gone := time.Since(t0)
	poll(t, "the zvols of "+ns+" gone", 5*time.Minute, 3*time.Second, func() (bool, string) {
		got, err := zvolList(context.Background())
		return err == nil && got == want, fmt.Sprintf("zvols now %q, before the test %q (%v)", got, want, err)
	})
	return gone
}

// deletePods deletes every pod of ns and waits until they are gone. Many
// pods with volumes to unmount take longer than one kubectl's bound, so
// it polls instead of kubectl delete --wait.
func deletePods(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	kubectl(t, c, "delete", "pods", "-n", ns, "--all", "--wait=false")
	poll(t, "the pods of "+ns+" gone", 15*time.Minute, 3*time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "get", "pods", "-n", ns, "-o", "name")
		left := strings.Fields(string(out))
		return err == nil && len(left) == 0, fmt.Sprintf("%d left %v", len(left), err)
	})
}

// percentile is the nearest-rank percentile p of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 · n)
	return s[max(rank, 1)-1]
}

// writePerf logs the results as a table, with each driver's ratio to the
// floor driver's figure of the same part, and writes the table to
// perfDir()/perf.md and the picture of the parts' claims Bound and pods
// Running over time to perfDir()/perf.svg.
func writePerf(t *testing.T, results []perfResult) {
	t.Helper()
	if len(results) == 0 {
		return
	}
	table := perfTable(results)
	t.Logf("TestPerformance, every figure (guest time):\n%s", table)
	dir := perfDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("figures: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "perf.md"), []byte(table), 0o644); err != nil {
		t.Errorf("figures: %v", err)
	}
	var panels []perfplot.Panel
	var parts []string
	for _, r := range results {
		if !slices.Contains(parts, r.part) && !strings.Contains(r.part, "one after another") {
			parts = append(parts, r.part)
		}
	}
	for _, part := range parts {
		bound := perfplot.Panel{Title: part + ": claims Bound"}
		running := perfplot.Panel{Title: part + ": pods Running"}
		for _, r := range results {
			if r.part != part {
				continue
			}
			if len(r.bound) > 0 {
				bound.Series = append(bound.Series, perfplot.Series{Name: r.driver, Times: r.bound})
			}
			if len(r.running) > 0 {
				running.Series = append(running.Series, perfplot.Series{Name: r.driver, Times: r.running})
			}
		}
		for _, p := range []perfplot.Panel{bound, running} {
			if len(p.Series) > 0 {
				panels = append(panels, p)
			}
		}
	}
	if len(panels) == 0 {
		return
	}
	var b bytes.Buffer
	if err := perfplot.WriteSVG(&b, panels); err != nil {
		t.Errorf("picture: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "perf.svg"), b.Bytes(), 0o644); err != nil {
		t.Errorf("picture: %v", err)
	}
}

// perfTable is the results as a Markdown table: for each part and driver
// the time until all claims were Bound and all pods Running, p50 and p99,
// each with its ratio to the floor driver's in the same part, the time
// to delete them and the Warning events.
func perfTable(results []perfResult) string {
	floor := map[string]perfResult{}
	for _, r := range results {
		if r.driver == "floor" {
			floor[r.part] = r
		}
	}
	// cell is a figure of the result, and its ratio to the floor's.
	cell := func(r perfResult, of func(perfResult) []time.Duration, p int) string {
		ds := of(r)
		if len(ds) == 0 {
			return "–"
		}
		v := percentile(ds, p)
		s := fmt.Sprintf("%.1f s", v.Seconds())
		if f, ok := floor[r.part]; ok && r.driver != "floor" && len(of(f)) > 0 {
			if fv := percentile(of(f), p); fv > 0 {
				s += fmt.Sprintf(" (%.2f×)", v.Seconds()/fv.Seconds())
			}
		}
		return s
	}
	bound := func(r perfResult) []time.Duration { return r.bound }
	running := func(r perfResult) []time.Duration { return r.running }
	var b strings.Builder
	b.WriteString("| part | driver | all Bound | Bound p50 | Bound p99 | all Running | Running p50 | Running p99 | deleted | Warning events |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		deleted := "–"
		if r.deleted > 0 {
			deleted = fmt.Sprintf("%.1f s", r.deleted.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", r.part, r.driver,
			cell(r, bound, 100), cell(r, bound, 50), cell(r, bound, 99),
			cell(r, running, 100), cell(r, running, 50), cell(r, running, 99), deleted, r.warnings)
	}
	b.WriteString("\nIn brackets: the ratio to the floor driver's figure of the same part. Percentiles are nearest-rank: with fewer than 100 samples p99 is the largest.\n")
	return b.String()
}
