//go:build kernel

package controller

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// benchVolumeSize is the size of every benchmark volume: small, so that
// a hundred fit in the 1 GiB zpool; the work per volume (a zfs create,
// a dozen configfs writes, the record's writes) does not depend on it.
const benchVolumeSize = 4 * mib

// BenchmarkCreatePublish measures CreateVolume + ControllerPublishVolume
// through pillar-controller's CSI socket against its floor in the same
// run: the same agent calls made directly over the agent's gRPC API
// (CreateVolume, ExportVolume, AllowHost, each with a fencing token of a
// generation above the last, as the controller sends them). The
// difference is what the controller adds, mostly its writes of the
// PillarVolumeState (the record, created at the backend create's
// generation; a status write after the create and after the export; a
// compare-and-swap of the generation before the export and, with the
// publication, before AllowHost) and the uncached read of it that
// ControllerPublishVolume starts from; the API server's own latency for
// those calls is measured in the same run on a scratch record, and
// api-est-ms is what 5 writes and 1 read cost at that latency.
//
// Each of b.N iterations makes benchRounds volumes each way, alternating
// the order; the per-op figures are medians.
func BenchmarkCreatePublish(b *testing.B) {
	const benchRounds = 5
	l := setup(b)
	s := newStack(b, l, "storage-bcp", backendZFS)
	st := s.stores[backendZFS]
	hostNQN := "nqn.2014-08.org.nvmexpress:uuid:" + fixture.RandomUUID(b)
	nodeID, err := export.FormatNodeID("bench-node", hostNQN)
	if err != nil {
		b.Fatal(err)
	}
	proto := &agentv1.Store{Name: st.name, Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: st.pool.Name, ParentDataset: zfsParent}}}
	transport := &agentv1.NvmeofTcpExport{BindAddress: "127.0.0.1", Port: uint32(s.port), AclEnabled: true}

	var ctrlCreate []time.Duration
	viaController := func(id string) time.Duration {
		v := s.track(st, id)
		began := time.Now()
		resp, err := s.ctrl.CreateVolume(csiCtx(b), s.createRequest(st, id, benchVolumeSize))
		if err != nil {
			b.Fatalf("CreateVolume %s: %v", id, err)
		}
		ctrlCreate = append(ctrlCreate, time.Since(began))
		if _, err := s.ctrl.ControllerPublishVolume(csiCtx(b), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeID,
			VolumeCapability: rwo(), VolumeContext: resp.GetVolume().GetVolumeContext()}); err != nil {
			b.Fatalf("ControllerPublishVolume %s: %v", id, err)
		}
		took := time.Since(began)
		if !allowed(v.nqn, hostNQN) {
			b.Fatalf("after ControllerPublishVolume %s the host NQN is not allowed: %s", id, describeSubsystem(v.nqn))
		}
		if _, err := s.ctrl.ControllerUnpublishVolume(csiCtx(b), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeID}); err != nil {
			b.Fatalf("ControllerUnpublishVolume %s: %v", id, err)
		}
		if _, err := s.ctrl.DeleteVolume(csiCtx(b), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			b.Fatalf("DeleteVolume %s: %v", id, err)
		}
		v.deleted = true
		return took
	}
	direct := func(id string) time.Duration {
		nqn := nqnOf(b, id)
		lifecycle := fixture.RandomUUID(b)
		gen := uint64(0)
		tok := func() *agentv1.FencingToken {
			gen++
			return &agentv1.FencingToken{LifecycleUid: lifecycle, PublicationGeneration: gen}
		}
		ctx := csiCtx(b)
		began := time.Now()
		if _, err := s.agent.api.CreateVolume(ctx, &agentv1.CreateVolumeRequest{FencingToken: tok(), VolumeId: id, Store: proto, CapacityBytes: benchVolumeSize}); err != nil {
			b.Fatalf("agent CreateVolume %s: %v", id, err)
		}
		if _, err := s.agent.api.ExportVolume(ctx, &agentv1.ExportVolumeRequest{FencingToken: tok(), VolumeId: id, Store: proto, SubsystemNqn: nqn,
			Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: transport}}); err != nil {
			b.Fatalf("agent ExportVolume %s: %v", id, err)
		}
		if _, err := s.agent.api.AllowHost(ctx, &agentv1.AllowHostRequest{FencingToken: tok(), VolumeId: id, SubsystemNqn: nqn, HostNqn: hostNQN}); err != nil {
			b.Fatalf("agent AllowHost %s: %v", id, err)
		}
		took := time.Since(began)
		if !allowed(nqn, hostNQN) {
			b.Fatalf("after AllowHost %s the host NQN is not allowed: %s", id, describeSubsystem(nqn))
		}
		if _, err := s.agent.api.DenyHost(ctx, &agentv1.DenyHostRequest{FencingToken: tok(), VolumeId: id, SubsystemNqn: nqn, HostNqn: hostNQN}); err != nil {
			b.Fatalf("agent DenyHost %s: %v", id, err)
		}
		if _, err := s.agent.api.UnexportVolume(ctx, &agentv1.UnexportVolumeRequest{FencingToken: tok(), VolumeId: id, SubsystemNqn: nqn}); err != nil {
			b.Fatalf("agent UnexportVolume %s: %v", id, err)
		}
		if _, err := s.agent.api.DeleteVolume(ctx, &agentv1.DeleteVolumeRequest{FencingToken: tok(), VolumeId: id, Store: proto}); err != nil {
			b.Fatalf("agent DeleteVolume %s: %v", id, err)
		}
		return took
	}
	// One of each first, untimed: connections, the controller's cached
	// informers and the agent's first zfs call are warm for both.
	viaController("pvc-bcp-warm-" + fixture.RandomHex(b, 3))
	direct("pvc-bcp-warmd-" + fixture.RandomHex(b, 3))

	var ctrl, raw []time.Duration
	ctrlCreate = nil
	b.ResetTimer()
	for i := 0; i < b.N*benchRounds; i++ {
		c, d := "pvc-bcp-c-"+fixture.RandomHex(b, 4), "pvc-bcp-d-"+fixture.RandomHex(b, 4)
		if i%2 == 0 {
			ctrl = append(ctrl, viaController(c))
			raw = append(raw, direct(d))
		} else {
			raw = append(raw, direct(d))
			ctrl = append(ctrl, viaController(c))
		}
	}
	b.StopTimer()
	write, read := l.apiLatency(b, 20)
	cm, dm := median(ctrl), median(raw)
	est := 5*write + read
	b.Logf("CreateVolume+ControllerPublish through pillar-controller: %v; the same agent calls direct: %v (medians of %d, guest time)", fmtMS(ctrl), fmtMS(raw), len(ctrl))
	b.Logf("of which CreateVolume through pillar-controller: %v", fmtMS(ctrlCreate))
	b.Logf("API server in the same run: a PillarVolumeState update %.1f ms, a get %.1f ms (medians); 5 writes + 1 read = %.1f ms; measured difference %.1f ms",
		write, read, est, cm-dm)
	b.ReportMetric(cm, "controller-ms/op")
	b.ReportMetric(dm, "direct-ms/op")
	b.ReportMetric(cm/dm, "ratio")
	b.ReportMetric(cm-dm, "extra-ms/op")
	b.ReportMetric(est, "api-est-ms/op")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkControllerRSS measures pillar-controller's memory (VmRSS and
// VmHWM) with no PillarVolumeState and with 1,000, created directly
// through the API as complete records of exported, published volumes (on
// a store no agent has, so nothing acts on them), once the controller's
// informer holds them all (its pillar_controller_volumes gauge, read from
// its cache, counts 1,000). The controller is restarted first (SIGTERM:
// it hands the Lease over) so that the baseline is a fresh process's.
// How long the API server took to take the 2,000 writes is reported too.
func BenchmarkControllerRSS(b *testing.B) {
	const n = 1000
	const settle = 20 * time.Second
	l := setup(b)
	ctx := context.Background()
	var existing v1alpha1.PillarVolumeStateList
	if err := l.admin.List(ctx, &existing); err != nil {
		b.Fatal(err)
	}
	if len(existing.Items) != 0 {
		b.Fatalf("%d PillarVolumeStates exist before the benchmark; the baseline needs none", len(existing.Items))
	}
	var rss0, hwm0, rssN, hwmN float64
	var createTook, statusTook time.Duration
	for range b.N {
		l.controller.terminate(time.Minute)
		if err := l.launchController(); err != nil {
			b.Fatal(err)
		}
		if err := l.waitLease(b, ""); err != nil {
			b.Fatal(err)
		}
		conn, err := grpc.NewClient(l.csiEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		waitProbe(b, "pillar-controller", csi.NewIdentityClient(conn), l.controller.exited)
		conn.Close()
		time.Sleep(settle)
		pid := l.controller.cmd.Process.Pid
		r, h := memory(b, pid)
		rss0, hwm0 = rss0+r, hwm0+h

		label := "pillar-csi.io/bench-" + fixture.RandomHex(b, 3)
		began := time.Now()
		vols := parallel(b, n, 16, func(i int) *v1alpha1.PillarVolumeState {
			id := fmt.Sprintf("pvc-rss-%04d", i)
			host := "nqn.2014-08.org.nvmexpress:uuid:" + fixture.RandomUUID(b)
			v := &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: id, Labels: map[string]string{label: "true"},
				Annotations: map[string]string{"pillar-csi.io/pvc-name": "data-" + id, "pillar-csi.io/pvc-namespace": "bench"}},
				Spec: v1alpha1.PillarVolumeStateSpec{VolumeID: id, StoreName: "no-such-store", ProtocolName: "no-such-protocol", CapacityBytes: 1 << 30,
					PublicationGeneration: 4,
					Export:                &v1alpha1.ExportSpec{BindAddress: "192.0.2.10", Port: 4420, ACLEnabled: ptr.To(true), SubsystemNQN: v1alpha1.NQN(nqnOf(b, id))},
					Publications:          []v1alpha1.Publication{{NodeID: "worker-1/" + host, HostNQN: v1alpha1.NQN(host), AccessMode: v1alpha1.AccessReadWriteOnce}}}}
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			if err := l.admin.Create(cctx, v); err != nil {
				b.Errorf("create PillarVolumeState %s: %v", id, err)
			}
			return v
		})
		createTook += time.Since(began)
		b.Cleanup(func() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			// A thousand deletes outlast the API server's request timeout
			// in the guest; it goes on deleting after answering so.
			if err := l.admin.DeleteAllOf(cctx, &v1alpha1.PillarVolumeState{}, client.MatchingLabels{label: "true"}); err != nil && !apierrors.IsTimeout(err) {
				b.Errorf("deleting the benchmark's PillarVolumeStates: %v", err)
				return
			}
			eventually(b, "the benchmark's PillarVolumeStates to be gone", 10*time.Minute, func() (bool, string) {
				var left v1alpha1.PillarVolumeStateList
				if err := l.admin.List(cctx, &left, client.MatchingLabels{label: "true"}); err != nil {
					return false, err.Error()
				}
				return len(left.Items) == 0, fmt.Sprintf("%d left", len(left.Items))
			})
		})
		began = time.Now()
		parallel(b, n, 16, func(i int) *v1alpha1.PillarVolumeState {
			v := vols[i]
			v.Status = v1alpha1.PillarVolumeStateStatus{BackendCreated: true, Exported: true, CapacityBytes: 1 << 30, ObservedGeneration: v.Generation,
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Exported", Message: "provisioned and exported",
					ObservedGeneration: v.Generation, LastTransitionTime: metav1.Now()}}}
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			if err := l.admin.Status().Update(cctx, v); err != nil {
				b.Errorf("status of PillarVolumeState %s: %v", v.Name, err)
			}
			return v
		})
		statusTook += time.Since(began)
		seenAt := time.Now()
		eventually(b, fmt.Sprintf("pillar-controller's cache to count %d PillarVolumeStates", n), statusTimeout, func() (bool, string) {
			got, err := l.volumeGauge()
			return err == nil && got == n, fmt.Sprintf("%v (%v)", got, err)
		})
		b.Logf("the controller's gauge counted %d records %v after the last write", n, time.Since(seenAt).Round(time.Millisecond))
		time.Sleep(settle)
		r, h = memory(b, pid)
		rssN, hwmN = rssN+r, hwmN+h
	}
	k := float64(b.N)
	b.Logf("pillar-controller (pid %d) VmRSS %.1f MiB with no PillarVolumeState, %.1f MiB with %d (VmHWM %.1f, %.1f MiB); "+
		"the API server took %v for %d creates and %v for %d status updates (16 at a time, guest time)",
		l.controller.cmd.Process.Pid, rss0/k/1024, rssN/k/1024, n, hwm0/k/1024, hwmN/k/1024, createTook/time.Duration(b.N), n, statusTook/time.Duration(b.N), n)
	b.ReportMetric(rss0/k/1024, "rss-0-MiB")
	b.ReportMetric(rssN/k/1024, "rss-1000-MiB")
	b.ReportMetric(hwm0/k/1024, "hwm-0-MiB")
	b.ReportMetric(hwmN/k/1024, "hwm-1000-MiB")
	b.ReportMetric(rssN/rss0, "rss-ratio")
	b.ReportMetric((rssN-rss0)/k/n, "KiB/record")
	b.ReportMetric(2*n*k/(createTook+statusTook).Seconds(), "api-writes/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkConcurrentCreate measures 100 CreateVolume calls made at once
// against the same 100 made one at a time, in the same run, through
// pillar-controller's CSI socket on one ZFS store; a call the controller
// fails (its agent calls time out while queued behind the others) is
// retried as the external-provisioner does, and counted. Every volume is
// deleted afterwards (concurrently; that time is reported too).
func BenchmarkConcurrentCreate(b *testing.B) {
	const n = 100
	l := setup(b)
	s := newStack(b, l, "storage-bcc", backendZFS)
	st := s.stores[backendZFS]
	create := func(id string, retries *atomic.Int64) {
		for attempt := 1; ; attempt++ {
			_, err := s.ctrl.CreateVolume(csiCtx(b), s.createRequest(st, id, benchVolumeSize))
			if err == nil {
				return
			}
			retries.Add(1)
			if attempt == 30 {
				b.Errorf("CreateVolume %s: %v (attempt %d)", id, err, attempt)
				return
			}
			b.Logf("CreateVolume %s: %v; retrying", id, err)
			time.Sleep(time.Second)
		}
	}
	deleteAll := func(ids []string) time.Duration {
		began := time.Now()
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				// Retried like CreateVolume: queued behind 99 others, the
				// agent's zfs destroy outlasts the controller's agent
				// call timeout.
				for attempt := 1; ; attempt++ {
					_, err := s.ctrl.DeleteVolume(csiCtx(b), &csi.DeleteVolumeRequest{VolumeId: id})
					if err == nil {
						return
					}
					if attempt == 10 {
						b.Errorf("DeleteVolume %s: %v (attempt %d)", id, err, attempt)
						return
					}
					time.Sleep(time.Second)
				}
			})
		}
		wg.Wait()
		if left := st.backendVolumes(b); len(left) != 0 {
			b.Errorf("after deleting the volumes the store still has %v", left)
		}
		return time.Since(began)
	}
	ids := func(prefix string) []string {
		out := make([]string, n)
		tag := fixture.RandomHex(b, 3)
		for i := range out {
			out[i] = fmt.Sprintf("pvc-%s-%s-%03d", prefix, tag, i)
			s.track(st, out[i]).deleted = true // deleteAll does it; dump on failure
		}
		return out
	}
	var seqWall, parWall, delSeq, delPar time.Duration
	var seqRetries, parRetries atomic.Int64
	b.ResetTimer()
	for range b.N {
		seq := ids("seq")
		began := time.Now()
		for _, id := range seq {
			create(id, &seqRetries)
		}
		seqWall += time.Since(began)
		b.StopTimer()
		delSeq += deleteAll(seq)
		b.StartTimer()

		par := ids("par")
		began = time.Now()
		var wg sync.WaitGroup
		for _, id := range par {
			wg.Go(func() { create(id, &parRetries) })
		}
		wg.Wait()
		parWall += time.Since(began)
		b.StopTimer()
		if got := len(st.backendVolumes(b)); got != n {
			b.Errorf("after %d concurrent CreateVolume calls the store has %d zvols", n, got)
		}
		delPar += deleteAll(par)
		b.StartTimer()
	}
	b.StopTimer()
	rounds := float64(b.N)
	b.Logf("%d CreateVolume one at a time: %v (%d retried); at once: %v (%d retried); deleting each set at once: %v, %v (guest time, %d round(s))",
		n, seqWall/time.Duration(b.N), seqRetries.Load(), parWall/time.Duration(b.N), parRetries.Load(), delSeq/time.Duration(b.N), delPar/time.Duration(b.N), b.N)
	b.ReportMetric(seqWall.Seconds()/rounds, "sequential-wall-s")
	b.ReportMetric(parWall.Seconds()/rounds, "concurrent-wall-s")
	b.ReportMetric(n*rounds/seqWall.Seconds(), "sequential-volumes/s")
	b.ReportMetric(n*rounds/parWall.Seconds(), "concurrent-volumes/s")
	b.ReportMetric(seqWall.Seconds()/parWall.Seconds(), "speedup")
	b.ReportMetric(float64(parRetries.Load())/rounds, "concurrent-retries")
	b.ReportMetric(0, "ns/op")
}

// parallel runs f for 0..n-1, width at a time, and returns the results
// in order.
func parallel[T any](b *testing.B, n, width int, f func(i int) T) []T {
	out := make([]T, n)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range width {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				out[i] = f(i)
			}
		})
	}
	wg.Wait()
	return out
}

// apiLatency is the median latency, in ms, of an update and of a get of
// a scratch PillarVolumeState (the calls the controller makes of its
// records), measured with the admin client, rounds times each.
func (l *lab) apiLatency(b *testing.B, rounds int) (write, read float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	id := "pvc-apilat-" + fixture.RandomHex(b, 4)
	v := &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: id}, Spec: v1alpha1.PillarVolumeStateSpec{VolumeID: id, StoreName: "no-such-store",
		CapacityBytes: benchVolumeSize, Export: &v1alpha1.ExportSpec{BindAddress: "127.0.0.1", Port: 4420, ACLEnabled: ptr.To(true), SubsystemNQN: v1alpha1.NQN(nqnOf(b, id))}}}
	if err := l.admin.Create(ctx, v); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.admin.Delete(context.Background(), v) }()
	var ws, rs []time.Duration
	for range rounds {
		v.Spec.PublicationGeneration++
		began := time.Now()
		if err := l.admin.Update(ctx, v); err != nil {
			b.Fatal(err)
		}
		ws = append(ws, time.Since(began))
		began = time.Now()
		if err := l.admin.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
			b.Fatal(err)
		}
		rs = append(rs, time.Since(began))
	}
	return median(ws), median(rs)
}

// volumeGauge sums pillar_controller_volumes over its states, as the
// controller's /metrics shows it.
func (l *lab) volumeGauge() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	total, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "pillar_controller_volumes{") {
			continue
		}
		f := strings.Fields(line)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		total, found = total+n, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("no pillar_controller_volumes in /metrics")
	}
	return int(total), nil
}

// memory returns VmRSS and VmHWM of pid, in KiB.
func memory(t testing.TB, pid int) (rss, hwm float64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss, _ = strconv.ParseFloat(f[1], 64)
		case "VmHWM:":
			hwm, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	if rss == 0 || hwm == 0 {
		t.Fatalf("no VmRSS/VmHWM in /proc/%d/status", pid)
	}
	return rss, hwm
}

// median is the median of ds, in ms.
func median(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// fmtMS is the median of ds with its range, for logs.
func fmtMS(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("%.1f ms (min %.1f, max %.1f)", median(ds), float64(s[0].Microseconds())/1000, float64(s[len(s)-1].Microseconds())/1000)
}
