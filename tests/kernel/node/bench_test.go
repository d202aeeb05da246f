//go:build kernel

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/pillar-csi/pillar-csi/csidriver/endpoint"
	"github.com/pillar-csi/pillar-csi/csidriver/identity"
	"github.com/pillar-csi/pillar-csi/csidriver/node"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// Environment of a re-executed test binary that serves pillar-node.
const (
	envChildSocket = "PILLAR_NODE_BENCH_SOCKET"
	envChildState  = "PILLAR_NODE_BENCH_STATE"
	envChildHost   = "PILLAR_NODE_BENCH_HOST" // "NQN ID"
)

// TestMain turns the test binary into a pillar-node process when the
// benchmark re-executes it, so that the service's memory is measured on
// its own, without the test harness in the same process.
func TestMain(m *testing.M) {
	if sock := os.Getenv(envChildSocket); sock != "" {
		os.Exit(serveChild(sock))
	}
	os.Exit(m.Run())
}

// serveChild does what pillar-node's main does, with the identity from the
// environment instead of /etc/nvme.
func serveChild(sock string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	nqn, id, _ := strings.Cut(os.Getenv(envChildHost), " ")
	// The benchmark's staging and target paths are b.TempDir()s: the
	// temporary directory plays kubelet's.
	svc, err := node.New(node.Config{NodeName: "worker-1", HostNQN: nqn, HostID: id, StateDir: os.Getenv(envChildState),
		KubeletDir: os.TempDir(), Logger: log})
	if err != nil {
		log.Error("child", "error", err)
		return 1
	}
	l, err := endpoint.Listen("unix://" + sock)
	if err != nil {
		log.Error("child", "error", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	g := endpoint.New(endpoint.Services{Identity: identity.New(svc.Ready, false), Node: svc}, log)
	if err := endpoint.Serve(ctx, g, l, 10*time.Second); err != nil {
		log.Error("child", "error", err)
		return 1
	}
	return 0
}

// child is pillar-node running as a separate process.
type child struct {
	*plugin
	pid int
	log string // its log file (JSON lines)
}

func startChild(b *testing.B, h host) *child {
	b.Helper()
	dir := b.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	logf, err := os.Create(filepath.Join(dir, "pillar-node.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildSocket+"="+sock, envChildState+"="+filepath.Join(dir, "state"), envChildHost+"="+h.NQN+" "+h.ID)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			log, _ := os.ReadFile(logf.Name())
			b.Errorf("pillar-node child: %v\n%s", err, log)
		}
		logf.Close()
	})
	fixture.WaitFor(b, "the child's socket", 60*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })
	c := &child{plugin: dial(b, sock), pid: cmd.Process.Pid, log: logf.Name()}
	fixture.WaitFor(b, "the child to answer Probe", 60*time.Second, func() bool {
		r, err := c.Identity.Probe(ctxT(b), &csi.ProbeRequest{})
		return err == nil && r.GetReady().GetValue()
	})
	return c
}

// memory returns VmRSS and VmHWM of pid in KiB.
func memory(b *testing.B, pid int) (rss, hwm float64) {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			v, _ := strconv.ParseFloat(f[1], 64)
			if f[0] == "VmRSS:" {
				rss = v
			} else {
				hwm = v
			}
		}
	}
	return rss, hwm
}

// rawStagePublish is the floor NodeStage+NodePublish is measured
// against: the same kernel steps with nothing around them — one write to
// /dev/nvme-fabrics, a poll of /sys/block for the namespace UUID, mkfs,
// mount, bind mount. It adds the time of each step to steps, and returns
// a teardown, which adds the time its unmounts and its disconnect took to
// unmounts and disconnects.
func rawStagePublish(b *testing.B, v *volume, h host, staging, target string, steps *rawSteps, unmounts, disconnects *time.Duration) func() {
	lap := time.Now()
	split := func(d *time.Duration) {
		now := time.Now()
		*d += now.Sub(lap)
		lap = now
	}
	ctrl := fixture.MustConnect(b, fixture.Connection{Port: int(v.Port), NQN: v.Ident.SubsystemNQN, HostNQN: h.NQN, HostID: h.ID,
		Options: []string{"ctrl_loss_tmo=" + strconv.Itoa(defaultCtrlLossTmo), "reconnect_delay=1"}})
	split(&steps.connect)
	// A tighter poll than fixture.NamespaceByUUID's, so that the floor is
	// not raised by the poll interval; bounded the same way.
	deadline := time.Now().Add(fixture.NamespaceTimeout)
	var dev string
	for {
		if dev == "" {
			files, _ := filepath.Glob("/sys/block/nvme*n*/uuid")
			for _, u := range files {
				if c, err := os.ReadFile(u); err == nil && strings.TrimSpace(string(c)) == v.Ident.UUID {
					if name := filepath.Base(filepath.Dir(u)); !strings.Contains(name, "c") {
						dev = "/dev/" + name
					}
				}
			}
		}
		if dev != "" {
			if _, err := os.Stat(dev); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("no device node of namespace %s after %v (found %q)", v.Ident.UUID, fixture.NamespaceTimeout, dev)
		}
		time.Sleep(5 * time.Millisecond)
	}
	split(&steps.namespace)
	if _, err := fixture.Command(context.Background(), "mkfs", "mkfs.ext4", "-F", "-q", dev); err != nil {
		b.Fatal(err)
	}
	split(&steps.mkfs)
	if err := syscall.Mount(dev, staging, "ext4", 0, ""); err != nil {
		b.Fatal(err)
	}
	split(&steps.mount)
	if err := os.MkdirAll(target, 0o750); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Mount(staging, target, "", syscall.MS_BIND, ""); err != nil {
		b.Fatal(err)
	}
	split(&steps.bind)
	return func() {
		start := time.Now()
		for _, p := range []string{target, staging} {
			if err := syscall.Unmount(p, 0); err != nil {
				b.Errorf("unmount %s: %v", p, err)
			}
		}
		*unmounts += time.Since(start)
		start = time.Now()
		ctrl.Disconnect(b)
		*disconnects += time.Since(start)
	}
}

// rawSteps are the summed times of rawStagePublish's steps.
type rawSteps struct{ connect, namespace, mkfs, mount, bind time.Duration }

// BenchmarkStagePublish measures NodeStageVolume+NodePublishVolume (ext4,
// blank 64 MiB LV, through gRPC to a pillar-node child process) against
// rawStagePublish on a twin LV in the same iteration, alternating which
// goes first, and the way back, NodeUnpublishVolume+NodeUnstageVolume
// against rawStagePublish's teardown (two unmounts and a disconnect); it
// reports both ratios and the child's memory.
func BenchmarkStagePublish(b *testing.B) {
	guest.RequireGuest(b)
	vg := fixture.NewVG(b, fixture.VGOptions{Size: int64(b.N)*144*mib + 256*mib})
	h := newHost(b)
	c := startChild(b, h)
	idleRSS, _ := memory(b, c.pid)

	var pillar, raw, pillarDown, rawDown, rawUnmounts, rawDisconnects time.Duration
	var rawUp rawSteps
	starts, ends := map[string]time.Time{}, map[string]time.Time{} // of NodeStage+NodePublish, by volume
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		vp, vr := exportVolume(b, vg, 64*mib), exportVolume(b, vg, 64*mib)
		dir := b.TempDir()
		for _, d := range []string{"p-staging", "r-staging"} {
			if err := os.Mkdir(filepath.Join(dir, d), 0o750); err != nil {
				b.Fatal(err)
			}
		}
		runPillar := func() {
			ctx := ctxT(b)
			start := time.Now()
			starts[vp.ID] = start
			if _, err := c.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
				VolumeId: vp.ID, StagingTargetPath: filepath.Join(dir, "p-staging"), VolumeCapability: mountCap("ext4"), VolumeContext: vp.Context(0),
			}); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
				VolumeId: vp.ID, StagingTargetPath: filepath.Join(dir, "p-staging"), TargetPath: filepath.Join(dir, "p-target"), VolumeCapability: mountCap("ext4"),
			}); err != nil {
				b.Fatal(err)
			}
			ends[vp.ID] = time.Now()
			pillar += ends[vp.ID].Sub(start)
		}
		var rawTeardown func()
		runRaw := func() {
			start := time.Now()
			rawTeardown = rawStagePublish(b, vr, h, filepath.Join(dir, "r-staging"), filepath.Join(dir, "r-target"), &rawUp, &rawUnmounts, &rawDisconnects)
			raw += time.Since(start)
		}
		if i%2 == 0 {
			runPillar()
			runRaw()
		} else {
			runRaw()
			runPillar()
		}
		downPillar := func() {
			ctx := ctxT(b)
			start := time.Now()
			if _, err := c.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vp.ID, TargetPath: filepath.Join(dir, "p-target")}); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vp.ID, StagingTargetPath: filepath.Join(dir, "p-staging")}); err != nil {
				b.Fatal(err)
			}
			pillarDown += time.Since(start)
		}
		downRaw := func() {
			start := time.Now()
			rawTeardown()
			rawDown += time.Since(start)
		}
		if i%2 == 0 {
			downPillar()
			downRaw()
		} else {
			downRaw()
			downPillar()
		}
	}
	// What a CSI call costs with nothing to do: the gRPC round trip to
	// the child process over its socket, which each of the two calls of
	// either way pays and the raw sequence does not.
	const rpcs = 20
	start := time.Now()
	for range rpcs {
		if _, err := c.Node.NodeGetCapabilities(ctxT(b), &csi.NodeGetCapabilitiesRequest{}); err != nil {
			b.Fatal(err)
		}
	}
	rpc := time.Since(start) / rpcs
	n := float64(b.N)
	logged := c.logTimes(b)
	// The way up, step by step, each a mean in ms: pillar-node's from its
	// log (the first from the call's start), the raw sequence's measured.
	up := []struct {
		name     string
		from, to string
		raw      time.Duration
	}{
		{"stage record, connect", "", "connected", rawUp.connect},
		{"wait for the namespace", "connected", "namespace found", rawUp.namespace},
		{"probe, mkfs", "namespace found", "made filesystem", rawUp.mkfs},
		{"mount", "made filesystem", "mounted", rawUp.mount},
		{"stage record complete", "mounted", "staged", 0},
		{"NodePublishVolume, bind", "staged", "published", rawUp.bind},
		{"answer", "published", "end", 0},
	}
	var table strings.Builder
	for _, u := range up {
		var sum time.Duration
		for id, t := range logged {
			from, to := t[u.from], t[u.to]
			if u.from == "" {
				from = starts[id]
			}
			if u.to == "end" {
				to = ends[id]
			}
			sum += to.Sub(from)
		}
		fmt.Fprintf(&table, "\n\t%-26s pillar %7.1f ms   raw %7.1f ms", u.name, ms(sum)/n, ms(u.raw)/n)
	}
	b.Logf("NodeStage+NodePublish step by step (means):%s", table.String())
	var disconnect, recordDelete time.Duration
	for _, t := range logged {
		disconnect += t["disconnected"].Sub(t["unmounted"])
		recordDelete += t["unstaged"].Sub(t["disconnected"])
	}
	b.Logf("NodeUnstageVolume's disconnect %.1f ms and stage record removal %.1f ms (means from its log); the raw teardown's two unmounts %.1f ms, disconnect %.1f ms",
		ms(disconnect)/n, ms(recordDelete)/n, ms(rawUnmounts)/n, ms(rawDisconnects)/n)
	rss, hwm := memory(b, c.pid)
	b.Logf("an empty CSI call (NodeGetCapabilities) to the child: %v; two of them are %.0f%% of the way up and %.0f%% of the way down",
		rpc, 100*float64(2*rpc)*float64(b.N)/float64(pillar), 100*float64(2*rpc)*float64(b.N)/float64(pillarDown))
	b.Logf("pillar-node child pid %d: VmRSS idle %.0f KiB, after %d stage+publish %.0f KiB, VmHWM %.0f KiB", c.pid, idleRSS, b.N, rss, hwm)
	b.ReportMetric(float64(pillar.Milliseconds())/n, "pillar-ms/op")
	b.ReportMetric(float64(raw.Milliseconds())/n, "raw-ms/op")
	b.ReportMetric(float64(pillar)/float64(raw), "pillar/raw")
	b.ReportMetric(float64(pillarDown.Milliseconds())/n, "pillar-down-ms/op")
	b.ReportMetric(float64(rawDown.Milliseconds())/n, "raw-down-ms/op")
	b.ReportMetric(float64(pillarDown)/float64(rawDown), "down-pillar/raw")
	b.ReportMetric(ms(rpc), "empty-rpc-ms")
	b.ReportMetric(ms(disconnect)/n, "pillar-disconnect-ms")
	b.ReportMetric(ms(rawDisconnects)/n, "raw-disconnect-ms")
	b.ReportMetric(idleRSS, "idle-rss-KiB")
	b.ReportMetric(rss, "rss-KiB")
	b.ReportMetric(hwm, "peak-rss-KiB")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// logTimes reads the child's log and returns, for each volume, when each
// of its messages was logged (the last time, for a message logged twice).
// Every volume of the benchmark must have its stage and unstage messages.
func (c *child) logTimes(b *testing.B) map[string]map[string]time.Time {
	data, err := os.ReadFile(c.log)
	if err != nil {
		b.Fatal(err)
	}
	times := map[string]map[string]time.Time{}
	for line := range strings.Lines(string(data)) {
		var e struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Volume string    `json:"volume_id"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Volume == "" {
			continue
		}
		if times[e.Volume] == nil {
			times[e.Volume] = map[string]time.Time{}
		}
		times[e.Volume][e.Msg] = e.Time
	}
	for id, t := range times {
		for _, msg := range []string{"connected", "namespace found", "made filesystem", "mounted", "staged", "published", "unmounted", "disconnected", "unstaged"} {
			if t[msg].IsZero() {
				b.Fatalf("the child's log %s has no %q for volume %s", c.log, msg, id)
			}
		}
	}
	return times
}
