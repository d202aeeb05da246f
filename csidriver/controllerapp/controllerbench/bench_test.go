// Package controllerbench measures pillar-controller, the real binary,
// against a real kube-apiserver (envtest) and in-process agents: how long
// a CRD change takes to reach its status, the process's memory idle and
// with 100 agents, stores and classes, and the API requests it makes at
// rest. Each figure comes with its baseline from the same run. Run with
// `make bench` (or `go test -run '^$' -bench . ./controllerapp/controllerbench/`
// in csidriver with KUBEBUILDER_ASSETS set).
package controllerbench_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/envtestsuite"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
)

var (
	cluster *envtestsuite.Cluster
	// seq keeps object names unique across the benchmark's runs.
	seq int
	// sharedController serves the latency benchmark's runs (the framework
	// calls a benchmark several times with growing b.N).
	sharedController *controller
)

func shared(b *testing.B) *controller {
	if sharedController == nil {
		sharedController = start(b)
	}
	return sharedController
}

func TestMain(m *testing.M) {
	var err error
	cluster, err = envtestsuite.Start(filepath.Join("..", "..", "..", "api", "config", "crd"), filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	code := m.Run()
	if sharedController != nil {
		sharedController.stop()
	}
	cluster.Stop()
	os.Exit(code)
}

// controller is a running pillar-controller process.
type controller struct {
	cmd     *exec.Cmd
	metrics string
}

// startController starts a controller for this benchmark run only.
func startController(b *testing.B) *controller {
	b.Helper()
	c := start(b)
	b.Cleanup(c.stop)
	return c
}

func (c *controller) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
}

func start(b *testing.B) *controller {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "pillar-controller")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/pillar-controller").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := &controller{metrics: "http://" + addr + "/metrics"}
	// The shipped defaults, but for the namespace and ports.
	c.cmd = exec.Command(bin, "-namespace", envtestsuite.Namespace, "-leader-election-id", fmt.Sprintf("bench-%d", time.Now().UnixNano()),
		"-metrics-address", addr, "-health-address", "0", "-log-level", "warn", "-csi-endpoint", "")
	c.cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig, "POD_NAMESPACE=")
	c.cmd.Stderr = os.Stderr
	if err := c.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	waitFor(b, time.Minute, "the controller leads", func() bool { return c.sample("leader_election_master_status{") == 1 })
	return c
}

// sample sums the series of /metrics that start with prefix and contain
// every one of also (label matches such as `method="PUT"`).
func (c *controller) sample(prefix string, also ...string) float64 {
	resp, err := http.Get(c.metrics)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var sum float64
	for line := range strings.SplitSeq(string(raw), "\n") {
		if strings.HasPrefix(line, prefix) && containsAll(line, also) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// rssBytes is the process's resident set.
func (c *controller) rssBytes(b *testing.B) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

func waitFor(b *testing.B, d time.Duration, what string, f func() bool) {
	b.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			b.Fatalf("after %v: %s did not happen", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ready(conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue
}

// BenchmarkStatusLatency: from the create of a PillarProtocol to its Ready
// status, seen through a watch, against the baseline of the API server
// alone: a ConfigMap's create seen through a watch.
func BenchmarkStatusLatency(b *testing.B) {
	shared(b)
	ctx := context.Background()
	wc, err := client.NewWithWatch(cluster.AdminConfig, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	var base, ctl time.Duration
	b.ResetTimer()
	for range b.N {
		seq++
		i := seq
		// Baseline: write + watch delivery.
		cms, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(envtestsuite.Namespace))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("base-%d", i), Namespace: envtestsuite.Namespace}}
		if err := wc.Create(ctx, cm); err != nil {
			b.Fatal(err)
		}
		for ev := range cms.ResultChan() {
			if ev.Type == watch.Added && ev.Object.(*corev1.ConfigMap).Name == cm.Name {
				break
			}
		}
		base += time.Since(start)
		cms.Stop()

		// The controller: write, reconcile, status write, watch delivery.
		ps, err := wc.Watch(ctx, &v1alpha1.PillarProtocolList{})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		p := &v1alpha1.PillarProtocol{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lat-%d", i)}, Spec: v1alpha1.PillarProtocolSpec{
			Type: v1alpha1.ProtocolNVMeOFTCP, NVMeOFTCP: &v1alpha1.NVMeOFTCPProtocol{BindAddress: "192.0.2.1"}}}
		if err := wc.Create(ctx, p); err != nil {
			b.Fatal(err)
		}
		for ev := range ps.ResultChan() {
			if o, ok := ev.Object.(*v1alpha1.PillarProtocol); ok && o.Name == p.Name && ready(o.Status.Conditions) {
				break
			}
		}
		ctl += time.Since(start)
		ps.Stop()
	}
	b.ReportMetric(float64(base.Microseconds())/1000/float64(b.N), "baseline-ms/op")
	b.ReportMetric(float64(ctl.Microseconds())/1000/float64(b.N), "status-ms/op")
	b.ReportMetric(float64(ctl)/float64(base), "ratio")
}

// BenchmarkScale100: 100 agents (each its own gRPC server), 100 stores and
// 100 classes. It reports the controller's RSS idle and loaded (ratio
// against idle), the time until every object is Ready, and the API
// requests per minute over a minute at rest, split into the Lease
// renewals of leader election (PUT) and everything else.
func BenchmarkScale100(b *testing.B) {
	const n = 100
	ctx := context.Background()
	for range b.N {
		c := startController(b)
		time.Sleep(5 * time.Second)
		idle := c.rssBytes(b)

		start := time.Now()
		proto := &v1alpha1.PillarProtocol{ObjectMeta: metav1.ObjectMeta{Name: "scale"}, Spec: v1alpha1.PillarProtocolSpec{
			Type: v1alpha1.ProtocolNVMeOFTCP, NVMeOFTCP: &v1alpha1.NVMeOFTCPProtocol{BindAddress: "192.0.2.1"}}}
		if err := cluster.Admin.Create(ctx, proto); err != nil {
			b.Fatal(err)
		}
		for i := range n {
			fa, err := fakeagent.Start(fakeagent.Options{NodeName: fmt.Sprintf("node-%d", i), Version: "v1"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(fa.Stop)
			fa.SetStore("tank", fakeagent.Capacity{Total: 100 << 30, Available: 50 << 30})
			objs := []client.Object{
				&v1alpha1.PillarAgent{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("agent-%d", i)},
					Spec: v1alpha1.PillarAgentSpec{Address: "127.0.0.1", Port: fa.Port()}},
				&v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("store-%d", i)}, Spec: v1alpha1.PillarStoreSpec{
					AgentName: v1alpha1.ObjectName(fmt.Sprintf("agent-%d", i)), Type: v1alpha1.BackendZFS, ZFS: &v1alpha1.ZFSStore{Pool: "tank"}}},
				&v1alpha1.PillarStorageClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("class-%d", i)}, Spec: v1alpha1.PillarStorageClassSpec{
					StoreName: v1alpha1.ObjectName(fmt.Sprintf("store-%d", i)), ProtocolName: "scale"}},
			}
			for _, o := range objs {
				if err := cluster.Admin.Create(ctx, o); err != nil {
					b.Fatal(err)
				}
			}
		}
		waitFor(b, 3*time.Minute, "every class Ready", func() bool {
			var l v1alpha1.PillarStorageClassList
			if err := cluster.Admin.List(ctx, &l); err != nil {
				return false
			}
			k := 0
			for _, x := range l.Items {
				if ready(x.Status.Conditions) {
					k++
				}
			}
			return k == n
		})
		settle := time.Since(start)
		time.Sleep(5 * time.Second)
		loaded := c.rssBytes(b)

		// At rest: what the controller asks of the API server.
		const window = time.Minute
		// At rest only leader election's Lease renewals update anything.
		const requests = "rest_client_requests_total{"
		puts0, all0 := c.sample(requests, `method="PUT"`), c.sample(requests)
		time.Sleep(window)
		puts1, all1 := c.sample(requests, `method="PUT"`), c.sample(requests)
		perMin := func(d float64) float64 { return d / window.Minutes() }

		b.ReportMetric(idle/(1<<20), "idle-RSS-MiB")
		b.ReportMetric(loaded/(1<<20), "loaded-RSS-MiB")
		b.ReportMetric(loaded/idle, "RSS-ratio")
		b.ReportMetric(settle.Seconds(), "s-to-all-Ready")
		b.ReportMetric(perMin(puts1-puts0), "lease-PUT/min")
		b.ReportMetric(perMin((all1-all0)-(puts1-puts0)), "other-req/min")
		// The baseline: one renewal per retry period (2 s by default).
		b.ReportMetric(60/2.0, "expected-renewals/min")
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
