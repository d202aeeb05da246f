//go:build kernel

package agent

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
	"google.golang.org/grpc/codes"
)

// Benchmark sizes are flags, so CI's test runs stay small and a benchmark
// run can be scaled (flags after -- reach the test binary in the guest):
// pillar-lab test tests/kernel/agent -- -test.bench . -agent.volumes 64
var (
	latencyVolumes    = flag.Int("agent.latency", 16, "volumes timed one by one in BenchmarkCreateExportLatency, per store")
	concurrentVolumes = flag.Int("agent.concurrent", 128, "concurrent create+export calls in BenchmarkConcurrentCreateExport")
	reconcileVolumes  = flag.Int("agent.volumes", 256, "exports reconciled after a wipe, and held for the RSS figure, in BenchmarkReconcileAfterWipe")
)

func benchSize(b *testing.B, name string, v int) int {
	if v < 1 {
		b.Fatalf("-%s=%d: want a positive count", name, v)
	}
	return v
}

// percentile of sorted durations, in milliseconds.
func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	i := int(float64(len(d)-1) * p)
	return float64(d[i]) / float64(time.Millisecond)
}

// createExport is one volume's create and export through the agent.
func createExport(ctx context.Context, c agentv1.AgentServiceClient, s labStore, id string, port int, size int64) error {
	tk := &agentv1.FencingToken{LifecycleUid: "bench-" + id, PublicationGeneration: 1}
	if _, err := c.CreateVolume(ctx, &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store, CapacityBytes: size}); err != nil {
		return err
	}
	_, err := c.ExportVolume(ctx, &agentv1.ExportVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store,
		Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(port, false)}})
	return err
}

// BenchmarkCreateExportLatency times create+export of one volume at a
// time through the agent (gRPC, fencing mark, backend, configfs) against
// the same work done with the backend and configfs modules directly
// (Create, DevicePath, Apply of the same export), alternating the two so
// both see the same store state.
func BenchmarkCreateExportLatency(b *testing.B) {
	guest.RequireGuest(b)
	n := benchSize(b, "agent.latency", *latencyVolumes)
	for _, c := range []struct {
		name string
		mk   func(testing.TB) labStore
	}{
		// Room for 2n volumes of 16 MiB (sparse zvols count at their
		// full size under overcommit ratio 1).
		{"lvm-linear", func(t testing.TB) labStore { return newLVMOf(t, false, int64(2*n+8)*16*mib) }},
		{"zfs-sparse", func(t testing.TB) labStore { return newZFSOf(t, int64(2*n+16)*16*mib) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := c.mk(b)
			requireEmptyNvmet(b)
			a := startAgent(b, b.TempDir())
			fs := configfs.NewFS("")
			port := fixture.FreeTCPPort(b)
			addr := configfs.Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "127.0.0.1", TrSvcID: strconv.Itoa(port)}
			ctx := context.Background()
			var agent, raw []time.Duration
			round := 0
			for b.Loop() {
				for i := range n {
					id := fmt.Sprintf("pvc-lat-%d-%d", round, i)
					start := time.Now()
					if err := createExport(ctx, a.c, s, id, port, 16*mib); err != nil {
						b.Fatal(err)
					}
					agent = append(agent, time.Since(start))

					rawID := fmt.Sprintf("raw-lat-%d-%d", round, i)
					ident, _ := export.For(rawID)
					start = time.Now()
					if _, err := s.backend.Create(ctx, rawID, 16*mib); err != nil {
						b.Fatal(err)
					}
					dev, err := s.backend.DevicePath(ctx, rawID)
					if err != nil {
						b.Fatal(err)
					}
					if err := fs.Apply(ctx, configfs.Export{NQN: ident.SubsystemNQN,
						Attrs:      configfs.SubsystemAttrs{AllowAnyHost: true},
						Namespaces: []configfs.Namespace{{NSID: 1, DevicePath: dev, DeviceUUID: ident.UUID, DeviceNGUID: ident.NGUID, Enabled: true}},
						Ports:      []configfs.Address{addr}}); err != nil {
						b.Fatal(err)
					}
					raw = append(raw, time.Since(start))
				}
				round++
			}
			slices.Sort(agent)
			slices.Sort(raw)
			b.ReportMetric(percentile(agent, 0.5), "agent-p50-ms")
			b.ReportMetric(percentile(agent, 0.99), "agent-p99-ms")
			b.ReportMetric(percentile(raw, 0.5), "raw-p50-ms")
			b.ReportMetric(percentile(raw, 0.99), "raw-p99-ms")
			b.ReportMetric(percentile(agent, 0.5)/percentile(raw, 0.5), "p50-ratio")
			b.ReportMetric(percentile(agent, 0.99)/percentile(raw, 0.99), "p99-ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkConcurrentCreateExport sends -agent.concurrent
// create+export calls for different volumes at once (LVM linear).
func BenchmarkConcurrentCreateExport(b *testing.B) {
	guest.RequireGuest(b)
	n := benchSize(b, "agent.concurrent", *concurrentVolumes)
	s := newLVMOf(b, false, int64(n+16)*4*mib)
	requireEmptyNvmet(b)
	a := startAgent(b, b.TempDir())
	port := fixture.FreeTCPPort(b)
	ctx := context.Background()
	var wall time.Duration
	var lat []time.Duration
	round := 0
	for b.Loop() {
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, n)
		start := time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				if err := createExport(ctx, a.c, s, fmt.Sprintf("pvc-conc-%d-%d", round, i), port, 4*mib); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}()
		}
		wg.Wait()
		wall += time.Since(start)
		close(errs)
		for err := range errs {
			b.Error(err)
		}
		round++
	}
	if got := len(readNvmet(b).Subsystems); got != n*round {
		b.Errorf("%d subsystems after %d concurrent exports", got, n*round)
	}
	slices.Sort(lat)
	b.ReportMetric(wall.Seconds()/float64(round), "wall-s")
	b.ReportMetric(float64(n*round)/wall.Seconds(), "volumes/s")
	b.ReportMetric(percentile(lat, 0.5), "call-p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "call-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkReconcileAfterWipe exports -agent.volumes volumes
// through an agent process, measures its RSS idle and with every volume
// exported, wipes configfs, starts a new agent process (a reboot) and
// times its Reconcile of the whole set.
func BenchmarkReconcileAfterWipe(b *testing.B) {
	guest.RequireGuest(b)
	n := benchSize(b, "agent.volumes", *reconcileVolumes)
	s := newLVMOf(b, false, int64(n+16)*4*mib)
	requireEmptyNvmet(b)
	gen := b.TempDir()
	ch := startChild(b, gen)
	idle := ch.rssKiB(b)
	port := fixture.FreeTCPPort(b)
	ctx := context.Background()
	// Eight at a time: LVM serializes on its lock anyway.
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := createExport(ctx, ch.c, s, fmt.Sprintf("pvc-rec-%d", i), port, 4*mib); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	loaded := ch.rssKiB(b)
	var desired []*agentv1.DesiredExport
	for i := range n {
		id := fmt.Sprintf("pvc-rec-%d", i)
		desired = append(desired, &agentv1.DesiredExport{FencingToken: &agentv1.FencingToken{LifecycleUid: "bench-" + id, PublicationGeneration: 1},
			VolumeId: id, Store: s.store, Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: tcp(port, false)}})
	}
	var took time.Duration
	rounds := 0
	for b.Loop() {
		ch.kill(b)
		wipeNvmet(b)
		ch = startChild(b, gen)
		start := time.Now()
		r, err := ch.c.Reconcile(ctx, &agentv1.ReconcileRequest{Exports: desired})
		took += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		for _, res := range r.GetResults() {
			if res.GetCode() != int32(codes.OK) {
				b.Fatalf("reconcile %s: %v %s", res.GetVolumeId(), codes.Code(res.GetCode()), res.GetMessage())
			}
		}
		if got := len(readNvmet(b).Subsystems); got != n {
			b.Fatalf("%d subsystems after reconciling %d", got, n)
		}
		rounds++
	}
	b.ReportMetric(took.Seconds()/float64(rounds), "reconcile-s")
	b.ReportMetric(float64(took.Milliseconds())/float64(rounds*n), "ms/export")
	b.ReportMetric(float64(idle)/1024, "rss-idle-MiB")
	b.ReportMetric(float64(loaded)/1024, "rss-loaded-MiB")
	b.ReportMetric(float64(ch.rssKiB(b))/1024, "rss-after-reconcile-MiB")
	b.ReportMetric(0, "ns/op")
}
