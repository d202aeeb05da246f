//go:build kernel

package controller

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"slices"
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
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
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
// difference is what the controller adds: its three writes of the
// PillarVolumeState (the record, created at the generation its backend
// create and export share; its status once the volume is exported; the
// publication's compare-and-swap before AllowHost; TestRecordWrites
// counts them, and that ControllerPublishVolume reads nothing from the
// API server), and its own work. The API server's latency for a write is
// measured in the same run on a scratch record: api-est-ms is what three
// writes cost at it, and own-cost is what is left of the difference,
// (through - direct - api-est) / direct.
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
	est := 3 * write
	b.Logf("CreateVolume+ControllerPublish through pillar-controller: %v; the same agent calls direct: %v (medians of %d, guest time)", fmtMS(ctrl), fmtMS(raw), len(ctrl))
	b.Logf("of which CreateVolume through pillar-controller: %v", fmtMS(ctrlCreate))
	b.Logf("API server in the same run: a PillarVolumeState update %.1f ms, a get %.1f ms (medians); 3 writes = %.1f ms; measured difference %.1f ms; the controller's own cost %.3f of the direct calls",
		write, read, est, cm-dm, (cm-dm-est)/dm)
	b.ReportMetric(cm, "controller-ms/op")
	b.ReportMetric(dm, "direct-ms/op")
	b.ReportMetric(cm/dm, "ratio")
	b.ReportMetric(cm-dm, "extra-ms/op")
	b.ReportMetric(est, "api-est-ms/op")
	b.ReportMetric((cm-dm-est)/dm, "own-cost")
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

// BenchmarkConcurrentCreate measures, on each backend that admits creates
// (thick ZFS, sparse ZFS, LVM thin), 100 CreateVolume calls made at once
// through pillar-controller's CSI socket against the same 100 made one at
// a time and against the floor: 100 raw creates (the backend's own
// command) with their configfs exports, also at once, in the same run. A
// call the controller fails is retried as the external-provisioner does,
// and counted. Every volume is deleted afterwards (concurrently; that time
// is reported too).
func BenchmarkConcurrentCreate(b *testing.B) {
	const n = 100
	l := setup(b)
	for _, kind := range []string{backendZFS, backendZFSSparse, backendLVMThin} {
		b.Run(kind, func(b *testing.B) {
			s := newStack(b, l, "storage-bcc-"+kind, kind)
			st := s.stores[kind]
			ids := func(prefix string) []string {
				out := make([]string, n)
				tag := fixture.RandomHex(b, 3)
				for i := range out {
					out[i] = fmt.Sprintf("pvc-%s-%s-%03d", prefix, tag, i)
					s.track(st, out[i]).deleted = true // deleteAtOnce does it; dump on failure
				}
				return out
			}
			var floorWall, seqWall, parWall, delSeq, delPar time.Duration
			var seqRetries, parRetries int
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				floorWall += rawCreatesAtOnce(b, st, n)
				seq := ids("seq")
				b.StartTimer()
				began := time.Now()
				for _, id := range seq {
					seqRetries += s.createRetried(b, st, id)
				}
				seqWall += time.Since(began)
				b.StopTimer()
				delSeq += s.deleteAtOnce(b, st, seq)
				par := ids("par")
				b.StartTimer()
				began = time.Now()
				parRetries += s.createAtOnce(b, st, par)
				parWall += time.Since(began)
				b.StopTimer()
				if got := len(st.backendVolumes(b)); got != n {
					b.Errorf("after %d concurrent CreateVolume calls the store has %d volumes", n, got)
				}
				delPar += s.deleteAtOnce(b, st, par)
				b.StartTimer()
			}
			b.StopTimer()
			rounds := time.Duration(b.N)
			b.Logf("%s: %d raw creates and exports at once: %v; %d CreateVolume one at a time: %v (%d retried); at once: %v (%d retried); deleting each set at once: %v, %v (guest time, %d round(s))",
				kind, n, floorWall/rounds, n, seqWall/rounds, seqRetries, parWall/rounds, parRetries, delSeq/rounds, delPar/rounds, b.N)
			r := float64(b.N)
			b.ReportMetric(floorWall.Seconds()/r, "floor-wall-s")
			b.ReportMetric(seqWall.Seconds()/r, "sequential-wall-s")
			b.ReportMetric(parWall.Seconds()/r, "concurrent-wall-s")
			b.ReportMetric(parWall.Seconds()/floorWall.Seconds(), "concurrent-floor-ratio")
			b.ReportMetric(seqWall.Seconds()/parWall.Seconds(), "speedup")
			b.ReportMetric(float64(parRetries)/r, "concurrent-retries")
			b.ReportMetric(delPar.Seconds()/r, "delete-concurrent-wall-s")
			b.ReportMetric(0, "ns/op")
		})
	}
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
	m, err := scrape(ctx, http.DefaultClient, "http://"+l.metricsAddr+"/metrics", "pillar_controller_volumes")
	if err != nil {
		return 0, err
	}
	if len(m) == 0 {
		return 0, fmt.Errorf("no pillar_controller_volumes in /metrics")
	}
	total := 0.0
	for _, n := range m {
		total += n
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

// BenchmarkSnapshotRestore measures, on a sparse ZFS store and an LVM thin
// store, CreateSnapshot and CreateVolume from that snapshot (a restore)
// through pillar-controller's CSI socket against the one command each
// backend runs to do it, in the same run:
//
//   - snap: CreateSnapshot (the PillarSnapshotState created, the agent's
//     CreateSnapshot with its two fencing marks and its checks that the
//     ID is free, the backend's command and its reads, the record's
//     status) against `zfs snapshot -o io.pillar-csi:snapshot-id=ID` or
//     `lvcreate --snapshot --setactivationskip y` with the backend's two
//     tags, of a volume made with the backend's own create command;
//   - restore: CreateVolume from the snapshot against `zfs clone` with the
//     properties the backend sets on a clone, or `lvcreate --snapshot
//     --setactivationskip n --activate y` with its tag. The controller's
//     CreateVolume always exports the volume as well: restore-noexport is
//     the call less the agent's ExportVolume as the agent timed it
//     (pillar_agent_rpc_duration_seconds), so it still holds the export's
//     two record writes (the generation's compare-and-swap and the
//     status). The agent's CreateVolume returns once the volume has a
//     block device; restore-raw-dev is the raw command plus that wait (a
//     zvol's node appears after zfs clone returns, found by
//     fixture.ZvolDevice, which polls every 100 ms; lvcreate makes the
//     LV's node itself).
//
// The controller's writes of its records (PillarSnapshotState and
// PillarVolumeState, their status included) and its reads of them are
// counted per call from the API server's own apiserver_request_total, and
// api-est is what they cost at the API server's latency measured in the
// same run (apiLatency), as BenchmarkCreatePublish estimates its own; the
// agent's handling time of each call is read from its metrics. Each of
// b.N iterations takes benchRounds snapshots and restores each way,
// alternating the order, after one of each untimed, whose snapshot and
// restore must look alike to the store's tools either way; the per-op
// figures are medians. pillar-controller runs at its default store
// refresh meanwhile, not the lab's 2 s. Every snapshot, restore and source
// is deleted, and the store and the API server must hold none of them at
// the end.
func BenchmarkSnapshotRestore(b *testing.B) {
	l := setup(b)
	// The lab reads every store's capacity every 2 s so that its tests
	// see statuses soon; that is an LVM or ZFS listing in the guest all
	// the time, competing with the calls measured (and holding the
	// volume group's lock). Measured at the controller's default, as it
	// is deployed: a store is then read again after each change.
	l.restartController(b, "-store-refresh", "")
	s := newStack(b, l, "storage-bsr", backendZFSSparse, backendLVMThin)
	hc, err := rest.HTTPClientFor(l.adminConfig)
	if err != nil {
		b.Fatal(err)
	}
	p := &probe{l: l, hc: hc, agentMetrics: s.agent.metricsURL()}
	for _, kind := range []string{backendZFSSparse, backendLVMThin} {
		b.Run(kind, func(b *testing.B) {
			// The stack's helpers fail, and register cleanups with, the
			// test they were made with: the sub-benchmark while it runs.
			parent := s.t
			s.t = b
			defer func() { s.t = parent }()
			benchSnapshotRestore(b, s, s.stores[kind], p)
		})
	}
}

func benchSnapshotRestore(b *testing.B, s *stack, st *store, p *probe) {
	const benchRounds = 8
	l := s.l
	tag := fixture.RandomHex(b, 3)
	src := s.createVolume(st, "pvc-bsr-src-"+tag, benchVolumeSize)
	rawSrc := "pvc-bsr-rawsrc-" + tag
	rawSrcGone := false
	b.Cleanup(func() {
		if !rawSrcGone {
			st.raw(b, st.rawRemove(st.rawVolumeName(rawSrc)))
		}
	})
	st.raw(b, st.rawVolume(rawSrc, benchVolumeSize))
	b.Logf("%s raw commands: %q; %q; %q", st.kind, st.rawVolume(rawSrc, benchVolumeSize), st.rawSnapshot("ID", rawSrc), st.rawRestore("NEW", "ID", rawSrc))
	began := time.Now()
	p.read(b)
	b.Logf("reading the API server's and the agent's metrics takes %v (guest time), before and after each call, outside its time", time.Since(began).Round(time.Millisecond))

	// viaController takes snapshot n of src through the controller and
	// restores volume n from it, timing each call; inspect, if not nil,
	// sees the snapshot and the volume (by rawSnapshotName and
	// rawVolumeName) before both are deleted.
	viaController := func(n string, inspect func(snap, vol string)) (snap, restore sample) {
		snapName, id := "snapshot-bsr-"+n, "pvc-bsr-"+n
		snapDone := false
		b.Cleanup(func() {
			if !snapDone {
				if _, err := s.ctrl.DeleteSnapshot(csiCtx(b), &csi.DeleteSnapshotRequest{SnapshotId: snapName}); err != nil {
					b.Errorf("cleanup: DeleteSnapshot %s: %v", snapName, err)
				}
			}
		})
		v := s.track(st, id)
		var sresp *csi.CreateSnapshotResponse
		snap = p.measure(b, func() {
			var err error
			sresp, err = s.ctrl.CreateSnapshot(csiCtx(b), &csi.CreateSnapshotRequest{Name: snapName, SourceVolumeId: src.id})
			if err != nil {
				b.Fatalf("CreateSnapshot %s of %s: %v", snapName, src.id, err)
			}
		})
		sn := sresp.GetSnapshot()
		if sn.GetSnapshotId() != snapName || !sn.GetReadyToUse() || sn.GetSizeBytes() != benchVolumeSize {
			b.Fatalf("CreateSnapshot %s returned %v, want it ready with %d bytes", snapName, sn, benchVolumeSize)
		}
		req := s.createRequest(st, id, benchVolumeSize)
		req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapName}}}
		var vresp *csi.CreateVolumeResponse
		restore = p.measure(b, func() {
			var err error
			vresp, err = s.ctrl.CreateVolume(csiCtx(b), req)
			if err != nil {
				b.Fatalf("CreateVolume %s from snapshot %s: %v", id, snapName, err)
			}
		})
		v.accept(vresp)
		if got := vresp.GetVolume(); got.GetCapacityBytes() != benchVolumeSize || got.GetContentSource().GetSnapshot().GetSnapshotId() != snapName {
			b.Fatalf("CreateVolume %s from snapshot %s returned %v", id, snapName, got)
		}
		if got, want := st.origin(b, id), st.rawSnapshotName(snapName, src.id); got != want {
			b.Fatalf("volume %s restored from snapshot %s has origin %q, want %q", id, snapName, got, want)
		}
		if inspect != nil {
			inspect(st.rawSnapshotName(snapName, src.id), st.rawVolumeName(id))
		}
		if _, err := s.ctrl.DeleteVolume(csiCtx(b), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			b.Fatalf("DeleteVolume %s: %v", id, err)
		}
		v.deleted = true
		if _, err := s.ctrl.DeleteSnapshot(csiCtx(b), &csi.DeleteSnapshotRequest{SnapshotId: snapName}); err != nil {
			b.Fatalf("DeleteSnapshot %s: %v", snapName, err)
		}
		snapDone = true
		return snap, restore
	}
	// direct does the same with the backend's commands alone, on rawSrc;
	// restore-raw-dev's times go to rawDev.
	var rawDev []time.Duration
	direct := func(n string, inspect func(snap, vol string)) (snap, restore sample) {
		snapID, id := "snapshot-bsr-"+n, "pvc-bsr-"+n
		snapObj, volObj := st.rawSnapshotName(snapID, rawSrc), st.rawVolumeName(id)
		var snapDone, volDone bool
		b.Cleanup(func() {
			if !volDone {
				st.raw(b, st.rawRemove(volObj))
			}
			if !snapDone {
				st.raw(b, st.rawRemove(snapObj))
			}
		})
		snapCmd, restoreCmd := st.rawSnapshot(snapID, rawSrc), st.rawRestore(id, snapID, rawSrc)
		snap = timed(b, func() { st.raw(b, snapCmd) })
		began := time.Now()
		restore = timed(b, func() { st.raw(b, restoreCmd) })
		st.device(b, id)
		rawDev = append(rawDev, time.Since(began))
		if inspect != nil {
			inspect(snapObj, volObj)
		}
		st.raw(b, st.rawRemove(volObj))
		volDone = true
		st.raw(b, st.rawRemove(snapObj))
		snapDone = true
		return snap, restore
	}

	// One of each first, untimed: connections, caches and the agent's
	// first commands are warm for both; and the raw commands must make
	// what the driver makes.
	var drv, raw []string
	viaController("c0-"+tag, func(snap, vol string) { drv = []string{st.describe(b, snap), st.describe(b, vol)} })
	direct("r0-"+tag, func(snap, vol string) { raw = []string{st.describe(b, snap), st.describe(b, vol)} })
	for i, what := range []string{"snapshot", "restored volume"} {
		b.Logf("%s %s: the driver's %s; the raw command's %s", st.kind, what, drv[i], raw[i])
		if drv[i] != raw[i] {
			b.Fatalf("%s: the raw command's %s is not the driver's: %s, want %s", st.kind, what, raw[i], drv[i])
		}
	}

	var ctrlSnap, ctrlRestore, rawSnap, rawRestore []sample
	rawDev = nil
	b.ResetTimer()
	for i := 0; i < b.N*benchRounds; i++ {
		c, r := fmt.Sprintf("c%d-%s", i+1, tag), fmt.Sprintf("r%d-%s", i+1, tag)
		var cs, cr, rs, rr sample
		if i%2 == 0 {
			cs, cr = viaController(c, nil)
			rs, rr = direct(r, nil)
		} else {
			rs, rr = direct(r, nil)
			cs, cr = viaController(c, nil)
		}
		ctrlSnap, ctrlRestore = append(ctrlSnap, cs), append(ctrlRestore, cr)
		rawSnap, rawRestore = append(rawSnap, rs), append(rawRestore, rr)
	}
	b.StopTimer()

	src.delete()
	st.raw(b, st.rawRemove(st.rawVolumeName(rawSrc)))
	rawSrcGone = true
	if left := st.contents(b); len(left) != 0 {
		b.Errorf("after the benchmark the %s store still holds %q", st.kind, left)
	}
	eventually(b, "the benchmark's PillarSnapshotStates and PillarVolumeStates to be gone", statusTimeout, func() (bool, string) {
		var sns v1alpha1.PillarSnapshotStateList
		var vs v1alpha1.PillarVolumeStateList
		if err := l.admin.List(context.Background(), &sns); err != nil {
			return false, err.Error()
		}
		if err := l.admin.List(context.Background(), &vs); err != nil {
			return false, err.Error()
		}
		var left []string
		for _, sn := range sns.Items {
			if strings.HasSuffix(sn.Name, tag) {
				left = append(left, "PillarSnapshotState "+sn.Name)
			}
		}
		for _, v := range vs.Items {
			if strings.HasSuffix(v.Name, tag) {
				left = append(left, "PillarVolumeState "+v.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("%q", left)
	})

	write, read := l.apiLatency(b, 20)
	// summary logs and returns the medians of one operation: through the
	// controller, raw, the agent's part, and the record writes.
	summary := func(op string, ctrl, raw []sample, agentMethod string) (ctrlMS, rawMS, agentMS, writes float64) {
		ctrlMS, rawMS = median(took(ctrl)), median(took(raw))
		agentMS = medianOf(ctrl, func(s sample) float64 { return s.agentMS[agentMethod] })
		writes = medianOf(ctrl, sample.recordWrites)
		reads := medianOf(ctrl, sample.recordReads)
		lo, hi := spread(ctrl, sample.recordWrites)
		pids := func(s sample) float64 { return float64(s.pids) }
		b.Logf("%s %s: through pillar-controller %v, of which the agent's %s %.1f ms; raw %v (medians of %d, guest time)",
			st.kind, op, fmtMS(took(ctrl)), agentMethod, agentMS, fmtMS(took(raw)), len(ctrl))
		b.Logf("%s %s: %.0f record writes a call (%.0f..%.0f), %.0f record reads; at the API server's %.1f ms a write and %.1f ms a read (medians): %.1f ms",
			st.kind, op, writes, lo, hi, reads, write, read, writes*write+reads*read)
		b.Logf("%s %s: processes started in the guest a call (median): %.0f through pillar-controller, %.0f raw",
			st.kind, op, medianOf(ctrl, pids), medianOf(raw, pids))
		last := ctrl[len(ctrl)-1]
		b.Logf("%s %s: the last call's API requests %v; its agent calls %v, ms %v", st.kind, op, last.api, last.agentN, last.agentMS)
		b.ReportMetric(reads, op+"-reads/op")
		b.ReportMetric(writes*write+reads*read, op+"-api-est-ms/op")
		return ctrlMS, rawMS, agentMS, writes
	}
	sc, sr, sa, sw := summary("snap", ctrlSnap, rawSnap, "CreateSnapshot")
	rc, rr, ra, rw := summary("restore", ctrlRestore, rawRestore, "CreateVolume")
	noExport := make([]time.Duration, len(ctrlRestore))
	for i, s := range ctrlRestore {
		noExport[i] = s.took - time.Duration(s.agentMS["ExportVolume"]*float64(time.Millisecond))
	}
	rn, rd := median(noExport), median(rawDev)
	b.Logf("%s restore: less the agent's ExportVolume %v; raw with the wait for its device %v", st.kind, fmtMS(noExport), fmtMS(rawDev))
	b.ReportMetric(sc, "snap-ms/op")
	b.ReportMetric(sa, "snap-agent-ms/op")
	b.ReportMetric(sr, "snap-raw-ms/op")
	b.ReportMetric(sc/sr, "snap-ratio")
	b.ReportMetric(sw, "snap-writes/op")
	b.ReportMetric(rc, "restore-ms/op")
	b.ReportMetric(rn, "restore-noexport-ms/op")
	b.ReportMetric(ra, "restore-agent-ms/op")
	b.ReportMetric(rr, "restore-raw-ms/op")
	b.ReportMetric(rd, "restore-raw-dev-ms/op")
	b.ReportMetric(rn/rr, "restore-ratio")
	b.ReportMetric(rn/rd, "restore-dev-ratio")
	b.ReportMetric(rw, "restore-writes/op")
	b.ReportMetric(0, "ns/op")
}

// restartController stops pillar-controller (SIGTERM: it hands its Lease
// over) and starts it again with flag set to value, or without flag when
// value is empty, and waits until it holds the Lease; at the end of the
// test it does the same with the lab's own arguments.
func (l *lab) restartController(t testing.TB, flag, value string) {
	t.Helper()
	restart := func(args []string) error {
		old, err := l.leaseHolder()
		if err != nil {
			return err
		}
		l.controller.terminate(time.Minute)
		l.controllerArgs = args
		if err := l.launchController(); err != nil {
			return err
		}
		return l.waitLease(t, old)
	}
	orig := l.controllerArgs
	args := slices.Clone(orig)
	i := slices.Index(args, flag)
	switch {
	case i < 0 && value != "":
		args = append(args, flag, value)
	case i >= 0 && value != "":
		args[i+1] = value
	case i >= 0:
		args = slices.Delete(args, i, i+2)
	}
	if err := restart(args); err != nil {
		t.Fatalf("restarting pillar-controller with %s %q: %v", flag, value, err)
	}
	t.Cleanup(func() {
		if err := restart(orig); err != nil {
			t.Errorf("restarting pillar-controller with the lab's arguments: %v", err)
		}
	})
}

// ---------------------------------------------------------------- raw backend commands

// The raw commands are the backend's own (backends/zfs: create, clone and
// CreateSnapshot; backends/lvm: create, cloneLV and CreateSnapshot) for a
// store of the harness, which sets no ZFS properties and no LVM device
// filter, run through the runner the agent uses (command.Exec: LC_ALL=C,
// a process group, the parent-death signal).

// rawVolumeName is the zvol's dataset or the LV (VG/LV) of volume id.
func (st *store) rawVolumeName(id string) string {
	if st.vg != nil {
		return st.vg.Name + "/" + lvm.LVName(st.vg.Name, id)
	}
	return st.pool.Name + "/" + zfsParent + "/" + id
}

// rawSnapshotName is SOURCE@ID, or the snapshot's LV (VG/LV).
func (st *store) rawSnapshotName(id, src string) string {
	if st.vg != nil {
		return st.rawVolumeName(id)
	}
	return st.rawVolumeName(src) + "@" + id
}

// rawVolume creates volume id as the backend's Create does.
func (st *store) rawVolume(id string, size int64) []string {
	if st.vg != nil {
		return []string{"lvm", "lvcreate", "--config", lvm.LVMConfig, "--yes", "--activate", "y", "--setactivationskip", "n", "--type", "thin",
			"--name", lvm.LVName(st.vg.Name, id), "--addtag", lvm.TagPrefix + id, "--virtualsize", strconv.FormatInt(size, 10) + "b",
			"--thinpool", st.vg.ThinPool, st.vg.Name}
	}
	argv := []string{"zfs", "create"}
	if st.kind == backendZFSSparse {
		argv = append(argv, "-s")
	}
	return append(argv, "-V", strconv.FormatInt(size, 10), "-o", "volblocksize="+strconv.Itoa(zfs.DefaultVolBlockSize), "-o", "volmode=dev",
		"-o", zfs.OwnerProperty+"="+id, st.rawVolumeName(id))
}

// rawSnapshot takes snapshot id of volume src as the backend's
// CreateSnapshot does.
func (st *store) rawSnapshot(id, src string) []string {
	if st.vg != nil {
		return []string{"lvm", "lvcreate", "--config", lvm.LVMConfig, "--yes", "--snapshot", "--setactivationskip", "y",
			"--name", lvm.LVName(st.vg.Name, id), "--addtag", lvm.SnapshotTagPrefix + id, "--addtag", lvm.SourceTagPrefix + src, st.rawVolumeName(src)}
	}
	return []string{"zfs", "snapshot", "-o", zfs.SnapshotProperty + "=" + id, st.rawSnapshotName(id, src)}
}

// rawRestore makes volume id from snapshot snap of src as the backend's
// CreateFromSnapshot does at the snapshot's size (no growth after).
func (st *store) rawRestore(id, snap, src string) []string {
	if st.vg != nil {
		return []string{"lvm", "lvcreate", "--config", lvm.LVMConfig, "--yes", "--snapshot", "--setactivationskip", "n", "--activate", "y",
			"--name", lvm.LVName(st.vg.Name, id), "--addtag", lvm.TagPrefix + id, st.rawSnapshotName(snap, src)}
	}
	// The create's properties but volblocksize, which is the origin's.
	argv := []string{"zfs", "clone", "-o", "volmode=dev"}
	if st.kind != backendZFSSparse {
		argv = append(argv, "-o", "refreservation=auto")
	}
	return append(argv, "-o", zfs.OwnerProperty+"="+id, st.rawSnapshotName(snap, src), st.rawVolumeName(id))
}

// rawRemove destroys a zvol or snapshot, or removes an LV, by name.
func (st *store) rawRemove(name string) []string {
	if st.vg != nil {
		return []string{"lvm", "lvremove", "--config", lvm.LVMConfig, "--yes", name}
	}
	return []string{"zfs", "destroy", name}
}

// raw runs argv as the agent runs its commands.
func (st *store) raw(t testing.TB, argv []string) {
	t.Helper()
	if _, err := (command.Exec{}).Run(context.Background(), argv[0], argv[1:]...); err != nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
}

// device waits for the block device of volume id, made by a raw command,
// as the agent's CreateVolume does before it answers.
func (st *store) device(t testing.TB, id string) {
	t.Helper()
	if st.vg != nil {
		if _, err := os.Stat(st.vg.DevicePath(lvm.LVName(st.vg.Name, id))); err != nil {
			t.Fatalf("the device of LV %s: %v", id, err)
		}
		return
	}
	if _, err := fixture.ZvolDevice(context.Background(), st.rawVolumeName(id), 30*time.Second); err != nil {
		t.Fatalf("the device of zvol %s: %v", id, err)
	}
}

// origin is what volume id was made from, as the store's tools say:
// SOURCE@SNAPSHOT for a zvol, VG/LV for a thin LV.
func (st *store) origin(t testing.TB, id string) string {
	t.Helper()
	ctx := context.Background()
	if st.vg != nil {
		out, err := fixture.LVM(ctx, "lvs", "--noheadings", "-o", "origin", st.rawVolumeName(id))
		if err != nil {
			t.Fatal(err)
		}
		return st.vg.Name + "/" + strings.TrimSpace(out)
	}
	out, err := fixture.Command(ctx, "zfs get origin", "zfs", "get", "-Hp", "-o", "value", "origin", st.rawVolumeName(id))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// describe is what the store's tools show of a zvol, snapshot or LV that
// the driver's and the raw command's must share: the properties set
// locally (pillar-csi's own with the ID left out), or the LV's
// attributes (but whether it is open), size and segment type.
func (st *store) describe(t testing.TB, name string) string {
	t.Helper()
	ctx := context.Background()
	if st.vg != nil {
		out, err := fixture.LVM(ctx, "lvs", "--noheadings", "--separator", " ", "--units", "b", "--nosuffix", "-o", "lv_attr,lv_size,segtype", name)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(out)
		if len(f) != 3 || len(f[0]) < 6 {
			t.Fatalf("lvs %s: %q", name, out)
		}
		// The sixth attribute says whether the device is open: the
		// driver's volume is, by its nvmet namespace.
		f[0] = f[0][:5] + "-" + f[0][6:]
		return strings.Join(f, " ")
	}
	out, err := fixture.Command(ctx, "zfs get", "zfs", "get", "-Hp", "-s", "local", "-o", "property,value", "all", name)
	if err != nil {
		t.Fatal(err)
	}
	var props []string
	for line := range strings.Lines(out) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "\t")
		if strings.HasPrefix(k, "io.pillar-csi:") {
			v = "ID"
		}
		props = append(props, k+"="+v)
	}
	slices.Sort(props)
	return strings.Join(props, " ")
}

// contents is everything in the store as its tools list it, hidden and
// deferred-destroy snapshots included: every dataset and snapshot under
// the ZFS parent dataset but itself, every LV of the group but the thin
// pool.
func (st *store) contents(t testing.TB) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	if st.vg != nil {
		out, err := fixture.LVM(ctx, "lvs", "--noheadings", "-o", "lv_name", st.vg.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range strings.Fields(out) {
			if n != st.vg.ThinPool {
				left = append(left, n)
			}
		}
		return left
	}
	parent := st.pool.Name + "/" + zfsParent
	out, err := fixture.Command(ctx, "zfs list", "zfs", "list", "-H", "-t", "all", "-r", "-o", "name", parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range strings.Fields(out) {
		if n != parent {
			left = append(left, n)
		}
	}
	return left
}

// ---------------------------------------------------------------- what a call cost

// sample is one timed call: its time, the processes the guest started
// meanwhile, and, for a call through the controller, what the API server
// and the agent served for it.
type sample struct {
	took time.Duration
	pids int
	// api counts the API server's requests by "VERB resource[/subresource]".
	api map[string]float64
	// agentMS and agentN are the agent's handling time (ms) and its calls,
	// by method.
	agentMS, agentN map[string]float64
}

// The controller's records, and the verbs that write or read them.
var (
	recordResources = []string{"pillarsnapshotstates", "pillarsnapshotstates/status", "pillarvolumestates", "pillarvolumestates/status"}
	writeVerbs      = []string{"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}
	readVerbs       = []string{"GET", "LIST"}
)

func (s sample) recordRequests(verbs []string) float64 {
	n := 0.0
	for k, v := range s.api {
		verb, res, _ := strings.Cut(k, " ")
		if slices.Contains(verbs, verb) && slices.Contains(recordResources, res) {
			n += v
		}
	}
	return n
}

func (s sample) recordWrites() float64 { return s.recordRequests(writeVerbs) }
func (s sample) recordReads() float64  { return s.recordRequests(readVerbs) }

// timed times call, and counts the processes the guest started meanwhile.
func timed(t testing.TB, call func()) sample {
	t.Helper()
	// Garbage from the scrapes and the last round collected first, so
	// that it is not collected during the call.
	runtime.GC()
	pid := lastPID(t)
	began := time.Now()
	call()
	s := sample{took: time.Since(began), pids: lastPID(t) - pid}
	if s.pids < 0 {
		s.pids += pidMax(t)
	}
	return s
}

// probe reads what the API server and the agent served around a call
// through the controller.
type probe struct {
	l            *lab
	hc           *http.Client // the administrator's, for the API server's /metrics
	agentMetrics string
}

// measure times call as timed does, with the API server's request counts
// and the agent's RPC durations read just before and after it, outside
// the time.
func (p *probe) measure(t testing.TB, call func()) sample {
	t.Helper()
	api0, ms0, n0 := p.read(t)
	s := timed(t, call)
	api1, ms1, n1 := p.read(t)
	s.api, s.agentMS, s.agentN = delta(api1, api0), delta(ms1, ms0), delta(n1, n0)
	return s
}

func (p *probe) read(t testing.TB) (api, agentMS, agentN map[string]float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	m, err := scrape(ctx, p.hc, strings.TrimSuffix(p.l.adminConfig.Host, "/")+"/metrics", "apiserver_request_total")
	if err != nil {
		t.Fatalf("the API server's metrics: %v", err)
	}
	api = map[string]float64{}
	for k, v := range m {
		lb := labelsOf(k)
		res := lb["resource"]
		if res == "" {
			continue
		}
		if sub := lb["subresource"]; sub != "" {
			res += "/" + sub
		}
		api[lb["verb"]+" "+res] += v
	}
	m, err = scrape(ctx, http.DefaultClient, p.agentMetrics, "pillar_agent_rpc_duration_seconds_sum", "pillar_agent_rpc_duration_seconds_count")
	if err != nil {
		t.Fatalf("the agent's metrics: %v", err)
	}
	agentMS, agentN = map[string]float64{}, map[string]float64{}
	for k, v := range m {
		method := labelsOf(k)["method"]
		if strings.HasPrefix(k, "pillar_agent_rpc_duration_seconds_sum") {
			agentMS[method] += v * 1000
		} else {
			agentN[method] += v
		}
	}
	return api, agentMS, agentN
}

// delta is after - before, without the keys that did not change.
func delta(after, before map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if x := v - before[k]; x != 0 {
			d[k] = x
		}
	}
	return d
}

func took(ss []sample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.took
	}
	return out
}

// medianOf is the median of f over ss.
func medianOf(ss []sample, f func(sample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// spread is the least and the most of f over ss.
func spread(ss []sample, f func(sample) float64) (lo, hi float64) {
	lo, hi = f(ss[0]), f(ss[0])
	for _, s := range ss[1:] {
		lo, hi = min(lo, f(s)), max(hi, f(s))
	}
	return lo, hi
}

// lastPID is the PID the guest's kernel handed out last (/proc/loadavg):
// over a call, the difference counts the processes started meanwhile
// (the storage commands and their helpers, and any thread a Go runtime
// adds).
func lastPID(t testing.TB) int {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("/proc/loadavg %q: %v", b, err)
	}
	return n
}

func pidMax(t testing.TB) int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// metricsURL is the agent's /metrics (its -metrics-address).
func (a *agent) metricsURL() string {
	i := slices.Index(a.args, "-metrics-address")
	return "http://" + a.args[i+1] + "/metrics"
}

// scrape reads the Prometheus text exposition at url and returns the
// samples of the metrics named, each keyed by its name and labels as
// written.
func scrape(ctx context.Context, hc *http.Client, url string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 || !slices.Contains(names, line[:end]) {
			continue
		}
		if line[end] == '{' {
			end = strings.LastIndexByte(line, '}') + 1
		}
		f := strings.Fields(line[end:])
		if len(f) == 0 {
			return nil, fmt.Errorf("metrics line %q has no value", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[line[:end]] = v
	}
	return out, sc.Err()
}

var labelRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// labelsOf are the labels of a sample as scrape keys it.
func labelsOf(sample string) map[string]string {
	m := map[string]string{}
	for _, g := range labelRE.FindAllStringSubmatch(sample, -1) {
		m[g[1]] = g[2]
	}
	return m
}
