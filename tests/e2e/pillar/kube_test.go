//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
)

// kubectl runs kubectl and returns its trimmed stdout, failing the test on
// an error.
func kubectl(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), nil, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// logKubectl logs `kubectl ARGS` and its output, for the record of a run
// (the documentation quotes it); an error is logged, not fatal.
func logKubectl(t *testing.T, c *cluster.Cluster, args ...string) {
	t.Helper()
	out, err := c.Kubectl(context.Background(), nil, args...)
	if err != nil {
		t.Logf("$ kubectl %s\n%s(%v)", strings.Join(args, " "), out, err)
		return
	}
	t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
}

func apply(t *testing.T, c *cluster.Cluster, manifest string) {
	t.Helper()
	applyWithin(t, c, 3*time.Minute, manifest)
}

// burstApplyTimeout bounds the apply of a whole burst: in the lab's busy
// guest 50 pods or 100 claims in one apply took longer than 3 minutes
// (each object is one request to an API server short of CPU).
const burstApplyTimeout = 15 * time.Minute

// applyWithin is apply bounded by timeout.
func applyWithin(t *testing.T, c *cluster.Cluster, timeout time.Duration, manifest string) {
	t.Helper()
	if out, err := c.KubectlWithin(context.Background(), timeout, []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

// wait runs `kubectl wait` (which watches, so the time it returns is when
// the condition was met, give or take kubectl's own start) and fails the
// test with `kubectl describe` of the object when the condition is not met
// within timeout. Each kubectl runs under the harness's 3-minute bound, so
// a longer wait is several of them.
func wait(t *testing.T, c *cluster.Cluster, ns, obj, cond string, timeout time.Duration) {
	t.Helper()
	const chunk = 150 * time.Second
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline).Round(time.Second)
		if left > chunk {
			left = chunk
		}
		if left < time.Second {
			left = time.Second
		}
		args := []string{"wait", "--for=" + cond, obj, "--timeout=" + left.String()}
		if ns != "" {
			args = append(args, "-n", ns)
		}
		out, err := c.Kubectl(context.Background(), nil, args...)
		if err == nil {
			return
		}
		if time.Now().Before(deadline) {
			// A wait that failed at once (the object not there yet)
			// is not retried in a tight loop.
			time.Sleep(2 * time.Second)
			continue
		}
		desc := []string{"describe", obj}
		if ns != "" {
			desc = append(desc, "-n", ns)
		}
		d, _ := c.Kubectl(context.Background(), nil, desc...)
		t.Fatalf("%s: not %s within %v: %v\n%s\n$ kubectl %s\n%s", obj, cond, timeout, err, out, strings.Join(desc, " "), d)
	}
}

// poll calls check every interval until it returns true or timeout passes,
// then fails with the last state check reported.
func poll(t *testing.T, what string, timeout, interval time.Duration, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, timeout, state)
		}
		time.Sleep(interval)
	}
}

// testNamespace creates a namespace for the test, deleted when it ends;
// when the test failed, its events, claims and pods are described first.
func testNamespace(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	ns := "e2e-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(ns) > 63 {
		ns = strings.TrimRight(ns[:63], "-")
	}
	kubectl(t, c, "create", "namespace", ns)
	// The admission of pods waits for the namespace's default service
	// account.
	poll(t, "the default service account of "+ns, 2*time.Minute, time.Second, func() (bool, string) {
		_, err := c.Kubectl(context.Background(), nil, "get", "serviceaccount", "default", "-n", ns)
		return err == nil, fmt.Sprint(err)
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, args := range [][]string{
				{"get", "events", "-n", ns, "--sort-by=.lastTimestamp"},
				{"describe", "pvc", "-n", ns},
				{"describe", "pods", "-n", ns},
			} {
				logKubectl(t, c, args...)
			}
		}
		if _, err := c.Kubectl(context.Background(), nil, "delete", "namespace", ns, "--wait=false"); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	return ns
}

// figures are the run's measurements, printed together at its end.
var figures struct {
	sync.Mutex
	rows []figure
}

type figure struct {
	what string
	d    time.Duration
}

// record logs a measurement and keeps it for the run's summary.
func record(t *testing.T, what string, d time.Duration) {
	t.Helper()
	t.Logf("measured: %-40s %6.1fs (guest uptime %6.1fs, %d MiB used)", what, d.Seconds(), cluster.Uptime().Seconds(), cluster.MemUsedMiB())
	figures.Lock()
	figures.rows = append(figures.rows, figure{what, d})
	figures.Unlock()
}

// summary is every measurement of the run, with the ratio of each pod
// start to the hostPath baseline.
func summary() string {
	figures.Lock()
	defer figures.Unlock()
	var base time.Duration
	for _, f := range figures.rows {
		if f.what == baselineFigure {
			base = f.d
		}
	}
	var b strings.Builder
	for _, f := range figures.rows {
		fmt.Fprintf(&b, "  %-40s %6.1fs", f.what, f.d.Seconds())
		if base > 0 && strings.HasSuffix(f.what, "pod Running") && f.what != baselineFigure {
			fmt.Fprintf(&b, "  (%.1f× the hostPath pod)", f.d.Seconds()/base.Seconds())
		}
		b.WriteString("\n")
	}
	return b.String()
}
