//go:build kernel

package pillar_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
)

// The sizes of TestPerformance's two parts; make e2e-perf runs the
// defaults.
var (
	perfSequential = flag.Int("perf.sequential", 20, "TestPerformance: claims bound and pods started one after another")
	perfParallel   = flag.Int("perf.parallel", 50, "TestPerformance: claims and pods created at once")
)

// perfClaimSize is small on purpose: TestPerformance measures the
// driver's and the cluster's steps, not mkfs on large devices, and 50
// claims must fit the lab's 4 GiB pool.
const perfClaimSize = "32Mi"

// perfPodScript writes a little through the volume, so that a Running pod
// has a filesystem that works, and stays up.
const perfPodScript = `set -e; echo ok > /data/ok; sync; sleep 3600`

// TestPerformance measures what a user waits for, against what the
// cluster itself costs:
//
//   - one after another (-perf.sequential, default 20): a claim of the
//     generated zfs-nvmeof class created → Bound, then a pod using it
//     created → Running; p50 and p99 of each, and of a pod with a hostPath
//     volume created → Running in the same cluster (the baseline);
//   - at once (-perf.parallel, default 50): that many claims and pods in
//     one kubectl apply, the time until every claim is Bound and every pod
//     Running, against the same number of hostPath pods at once; nothing
//     may fail. Then the time until every PersistentVolume is gone after
//     the claims are deleted, and no zvol is left.
//
// The times are taken the way the other tests take them (kubectl wait
// and polls from inside the guest), so they include kubectl's own start.
func TestPerformance(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	before, err := zvolList(ctx)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("sequential", func(t *testing.T) {
		n := *perfSequential
		ns := testNamespace(t, c)
		dir := hostPathDir(t)
		var bound, running, baseline []time.Duration
		for i := range n {
			t0 := time.Now()
			apply(t, c, pod(ns, fmt.Sprintf("hostpath-%02d", i), perfPodScript, fmt.Sprintf("hostPath: {path: %s, type: Directory}", dir), false))
			wait(t, c, ns, fmt.Sprintf("pod/hostpath-%02d", i), "condition=Ready", 5*time.Minute)
			baseline = append(baseline, time.Since(t0))
		}
		for i := range n {
			name := fmt.Sprintf("data-%02d", i)
			t0 := time.Now()
			apply(t, c, claim(ns, name, "zfs-nvmeof", "Filesystem", "ReadWriteOnce", perfClaimSize))
			wait(t, c, ns, "pvc/"+name, "jsonpath={.status.phase}=Bound", 5*time.Minute)
			bound = append(bound, time.Since(t0))
			t1 := time.Now()
			apply(t, c, pod(ns, "pod-"+name, perfPodScript, fmt.Sprintf("persistentVolumeClaim: {claimName: %s}", name), false))
			wait(t, c, ns, "pod/pod-"+name, "condition=Ready", 5*time.Minute)
			running = append(running, time.Since(t1))
		}
		reportPercentiles(t, fmt.Sprintf("sequential x%d: hostPath pod Running", n), baseline, nil)
		reportPercentiles(t, fmt.Sprintf("sequential x%d: PVC Bound", n), bound, nil)
		reportPercentiles(t, fmt.Sprintf("sequential x%d: PVC pod Running", n), running, baseline)
		deleteAll(t, c, ns, n, before)
	})

	t.Run("parallel", func(t *testing.T) {
		n := *perfParallel
		ns := testNamespace(t, c)
		dir := hostPathDir(t)
		var base strings.Builder
		for i := range n {
			fmt.Fprintf(&base, "---\n%s", pod(ns, fmt.Sprintf("hostpath-%02d", i), perfPodScript, fmt.Sprintf("hostPath: {path: %s, type: Directory}", dir), false))
		}
		t0 := time.Now()
		apply(t, c, base.String())
		baseline := waitAll(t, c, ns, n, t0, 20*time.Minute, phaseWait{"pods", "hostpath-", "Running"})[0]
		record(t, fmt.Sprintf("parallel x%d: every hostPath pod Running", n), time.Since(t0))
		deletePods(t, c, ns)

		var all strings.Builder
		for i := range n {
			name := fmt.Sprintf("data-%02d", i)
			fmt.Fprintf(&all, "---\n%s---\n%s", claim(ns, name, "zfs-nvmeof", "Filesystem", "ReadWriteOnce", perfClaimSize),
				pod(ns, "pod-"+name, perfPodScript, fmt.Sprintf("persistentVolumeClaim: {claimName: %s}", name), false))
		}
		t1 := time.Now()
		apply(t, c, all.String())
		// One poll watches both, so that a pod Running before the last
		// claim is Bound is timed when it is.
		got := waitAll(t, c, ns, n, t1, 30*time.Minute, phaseWait{"pvc", "data-", "Bound"}, phaseWait{"pods", "pod-data-", "Running"})
		bound, running := got[0], got[1]
		record(t, fmt.Sprintf("parallel x%d: every PVC Bound", n), slices.Max(bound))
		record(t, fmt.Sprintf("parallel x%d: every PVC pod Running", n), slices.Max(running))
		logEventSummary(t, c, ns)
		logControllerMetrics(t, c)
		logAgentErrors(t, c, t1)
		reportPercentiles(t, fmt.Sprintf("parallel x%d: hostPath pod Running", n), baseline, nil)
		reportPercentiles(t, fmt.Sprintf("parallel x%d: PVC Bound", n), bound, nil)
		reportPercentiles(t, fmt.Sprintf("parallel x%d: PVC pod Running", n), running, baseline)
		deleteAll(t, c, ns, n, before)
	})
	t.Logf("figures of the run so far:\n%s", summary())
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

// objectNames matches what makes one object's event message differ from
// another's: volume IDs, UUIDs and host NQNs, kubelet's pod names and the
// test's claim and pod names.
var objectNames = regexp.MustCompile(`pvc-[0-9a-f-]{36}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"[a-z0-9-]+_[a-z0-9-]+\([^)]*\)"|(pod-data|data|hostpath)-[0-9]+`)

// logEventSummary logs how many events of each reason the objects of ns
// got, with each distinct message (object names left out, cut at 400
// characters): where the time of a slow run went, in the words of the sidecars
// and the driver.
func logEventSummary(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	out, err := c.Kubectl(context.Background(), nil, "get", "events", "-n", ns, "-o",
		`jsonpath={range .items[*]}{.reason}{"\t"}{.count}{"\t"}{.message}{"\n"}{end}`)
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

// logControllerMetrics logs the CSI operations each pillar-controller
// replica served, by method and code, with their total time: the
// _count and _sum series of its /metrics, read through the API server's
// pod proxy.
func logControllerMetrics(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	pods := strings.Fields(kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=controller", "-o", "jsonpath={.items[*].metadata.name}"))
	for _, p := range pods {
		out, err := c.Kubectl(context.Background(), nil, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:9430/proxy/metrics", deploy.Namespace, p))
		if err != nil {
			t.Logf("metrics of %s: %v", p, err)
			continue
		}
		var keep []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "pillar_controller_csi_operation_duration_seconds_count") ||
				strings.HasPrefix(l, "pillar_controller_csi_operation_duration_seconds_sum") ||
				strings.HasPrefix(l, "pillar_controller_fencing_rejections_total") {
				keep = append(keep, l)
			}
		}
		t.Logf("CSI operations served by %s:\n%s", p, strings.Join(keep, "\n"))
	}
}

// logAgentErrors logs the first errors pillar-agent logged since since:
// the agent's own words for a failure that reaches the claims' events
// only as one line of a CSI error.
func logAgentErrors(t *testing.T, c *cluster.Cluster, since time.Time) {
	t.Helper()
	const most = 30
	out, err := c.Kubectl(context.Background(), nil, "logs", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent",
		"--tail=-1", "--since-time="+since.UTC().Format(time.RFC3339))
	if err != nil {
		t.Logf("logs of pillar-agent: %v", err)
		return
	}
	var errs []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, "level=ERROR") {
			errs = append(errs, l)
		}
	}
	n := len(errs)
	if n > most {
		errs = append(errs[:most], fmt.Sprintf("… and %d more", n-most))
	}
	t.Logf("pillar-agent logged %d errors since %s:\n%s", n, since.UTC().Format(time.TimeOnly), strings.Join(errs, "\n"))
}

// deleteAll deletes the test's pods and claims, records how long until
// the n PersistentVolumes of the claims are gone, and checks that the
// pool holds the zvols it held before the test (want), no more.
func deleteAll(t *testing.T, c *cluster.Cluster, ns string, n int, want string) {
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
	record(t, fmt.Sprintf("x%d: claims deleted → every PV gone", n), time.Since(t0))
	poll(t, "the zvols of "+ns+" gone", 5*time.Minute, 3*time.Second, func() (bool, string) {
		got, err := zvolList(context.Background())
		return err == nil && got == want, fmt.Sprintf("zvols now %q, before the test %q (%v)", got, want, err)
	})
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

// reportPercentiles records the p50 and p99 of ds under what, and their
// ratio to the same percentiles of base when base is given. With fewer
// than 100 samples p99 is the largest sample.
func reportPercentiles(t *testing.T, what string, ds, base []time.Duration) {
	t.Helper()
	if len(ds) == 0 {
		t.Fatalf("%s: no samples", what)
	}
	p50, p99 := percentile(ds, 50), percentile(ds, 99)
	record(t, what+" p50", p50)
	record(t, what+" p99", p99)
	if len(base) > 0 {
		b50, b99 := percentile(base, 50), percentile(base, 99)
		t.Logf("measured: %s: p50 %.2f× and p99 %.2f× the hostPath pod's", what, p50.Seconds()/b50.Seconds(), p99.Seconds()/b99.Seconds())
	}
}

// percentile is the nearest-rank percentile p of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 · n)
	return s[max(rank, 1)-1]
}
