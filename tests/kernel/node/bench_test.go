//go:build kernel

package node

import (
	"context"
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

	"github.com/pillar-csi/pillar-csi/csidriver/identity"
	"github.com/pillar-csi/pillar-csi/csidriver/node"
	"github.com/pillar-csi/pillar-csi/csidriver/server"
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
	svc, err := node.New(node.Config{NodeName: "worker-1", HostNQN: nqn, HostID: id, StateDir: os.Getenv(envChildState), Logger: log})
	if err != nil {
		log.Error("child", "error", err)
		return 1
	}
	l, err := server.Listen("unix://" + sock)
	if err != nil {
		log.Error("child", "error", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	g := server.New(server.Services{Identity: identity.New(svc.Ready, false), Node: svc}, log)
	if err := server.Serve(ctx, g, l, 10*time.Second); err != nil {
		log.Error("child", "error", err)
		return 1
	}
	return 0
}

// child is pillar-node running as a separate process.
type child struct {
	*plugin
	pid int
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
	c := &child{plugin: dial(b, sock), pid: cmd.Process.Pid}
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
// mount, bind mount. It returns the device and a teardown.
func rawStagePublish(b *testing.B, v *volume, h host, staging, target string) func() {
	ctrl := fixture.MustConnect(b, fixture.Connection{Port: int(v.Port), NQN: v.Ident.SubsystemNQN, HostNQN: h.NQN, HostID: h.ID,
		Options: []string{"ctrl_loss_tmo=" + strconv.Itoa(defaultCtrlLossTmo), "reconnect_delay=1"}})
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
	if _, err := fixture.Command(context.Background(), "mkfs", "mkfs.ext4", "-F", "-q", dev); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Mount(dev, staging, "ext4", 0, ""); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Mount(staging, target, "", syscall.MS_BIND, ""); err != nil {
		b.Fatal(err)
	}
	return func() {
		for _, p := range []string{target, staging} {
			if err := syscall.Unmount(p, 0); err != nil {
				b.Errorf("unmount %s: %v", p, err)
			}
		}
		ctrl.Disconnect(b)
	}
}

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

	var pillar, raw, pillarDown, rawDown time.Duration
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
			pillar += time.Since(start)
		}
		var rawTeardown func()
		runRaw := func() {
			start := time.Now()
			rawTeardown = rawStagePublish(b, vr, h, filepath.Join(dir, "r-staging"), filepath.Join(dir, "r-target"))
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
	rss, hwm := memory(b, c.pid)
	b.Logf("pillar-node child pid %d: VmRSS idle %.0f KiB, after %d stage+publish %.0f KiB, VmHWM %.0f KiB", c.pid, idleRSS, b.N, rss, hwm)
	n := float64(b.N)
	b.ReportMetric(float64(pillar.Milliseconds())/n, "pillar-ms/op")
	b.ReportMetric(float64(raw.Milliseconds())/n, "raw-ms/op")
	b.ReportMetric(float64(pillar)/float64(raw), "pillar/raw")
	b.ReportMetric(float64(pillarDown.Milliseconds())/n, "pillar-down-ms/op")
	b.ReportMetric(float64(rawDown.Milliseconds())/n, "raw-down-ms/op")
	b.ReportMetric(float64(pillarDown)/float64(rawDown), "down-pillar/raw")
	b.ReportMetric(idleRSS, "idle-rss-KiB")
	b.ReportMetric(rss, "rss-KiB")
	b.ReportMetric(hwm, "peak-rss-KiB")
}
