//go:build kernel

package node

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/csidriver/endpoint"
	"github.com/pillar-csi/pillar-csi/csidriver/identity"
	"github.com/pillar-csi/pillar-csi/csidriver/node"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// callTimeout bounds every CSI call of the suite: under TCG a mkfs.xfs
// takes seconds.
const callTimeout = 3 * time.Minute

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// host is an initiator identity of the suite: each test connects as its
// own host.
type host struct{ NQN, ID string }

func newHost(t testing.TB) host {
	id := fixture.RandomUUID(t)
	return host{NQN: "nqn.2014-08.org.nvmexpress:uuid:" + id, ID: id}
}

// plugin is a node service served on a unix socket, with its clients.
type plugin struct {
	Node     csi.NodeClient
	Identity csi.IdentityClient
	Socket   string
	stop     func()
}

// startPlugin serves a new node service instance on a fresh socket; it is
// stopped at cleanup or by Stop.
func startPlugin(t testing.TB, h host, stateDir string) *plugin {
	t.Helper()
	svc, err := node.New(node.Config{
		NodeName: "worker-1", HostNQN: h.NQN, HostID: h.ID, StateDir: stateDir,
		// The suite's staging and target paths are t.TempDir()s: the
		// temporary directory plays kubelet's.
		KubeletDir: os.TempDir(),
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		// Short enough to fail a test quickly, long enough for TCG.
		NamespaceTimeout: 60 * time.Second, DisconnectTimeout: 60 * time.Second, ResizeTimeout: 60 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := endpoint.Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	g := endpoint.New(endpoint.Services{Identity: identity.New(svc.Ready, false), Node: svc}, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- endpoint.Serve(ctx, g, l, 10*time.Second) }()
	p := dial(t, sock)
	p.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(p.Stop)
	return p
}

// Stop stops the plugin (idempotent), as a restart of the DaemonSet pod.
func (p *plugin) Stop() {
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
}

func dial(t testing.TB, sock string) *plugin {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &plugin{Node: csi.NewNodeClient(cc), Identity: csi.NewIdentityClient(cc), Socket: sock}
}

// testWriter sends the service's log lines to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// volume is an LV exported over NVMe/TCP on 127.0.0.1 the way pillar-agent
// exports it.
type volume struct {
	ID     string
	LV     string
	Device string // /dev/VG/LV on the target side
	Port   uint16
	Ident  export.Identity
	vg     *fixture.VG
	fs     *configfs.FS
}

var volumeSeq int

// exportVolume creates a linear LV of size bytes and exports it; the
// export and the LV are removed at cleanup.
func exportVolume(t testing.TB, vg *fixture.VG, size int64) *volume {
	t.Helper()
	volumeSeq++
	v := &volume{ID: fmt.Sprintf("pvc-%d-%s", volumeSeq, fixture.RandomHex(t, 4)), vg: vg, fs: configfs.NewFS(configfs.DefaultRoot), Port: uint16(fixture.FreeTCPPort(t))}
	v.LV = strings.ReplaceAll(v.ID, ".", "-")
	v.Device = vg.CreateLinear(t, v.LV, size)
	var err error
	if v.Ident, err = export.For(v.ID); err != nil {
		t.Fatal(err)
	}
	v.apply(t)
	t.Cleanup(func() { v.Unexport(t) })
	return v
}

func (v *volume) apply(t testing.TB) {
	t.Helper()
	err := v.fs.Apply(ctxT(t), configfs.Export{
		NQN:   v.Ident.SubsystemNQN,
		Attrs: configfs.SubsystemAttrs{AllowAnyHost: true},
		Namespaces: []configfs.Namespace{{
			NSID: v.Ident.NamespaceID, DevicePath: v.Device,
			DeviceUUID: v.Ident.UUID, DeviceNGUID: v.Ident.NGUID, Enabled: true,
		}},
		Ports: []configfs.Address{{TrType: "tcp", AdrFam: "ipv4", TrAddr: "127.0.0.1", TrSvcID: strconv.Itoa(int(v.Port))}},
	})
	if err != nil {
		t.Fatalf("export %s: %v", v.ID, err)
	}
}

// Unexport removes the export: the target goes away under a connected
// initiator. Idempotent.
func (v *volume) Unexport(t testing.TB) {
	t.Helper()
	if err := v.fs.Remove(context.Background(), v.Ident.SubsystemNQN); err != nil && !configfs.IsNotExist(err) {
		t.Errorf("unexport %s: %v", v.ID, err)
	}
}

// Context is the volume context the controller would set; ctrlLossTmo 0
// means defaultCtrlLossTmo.
func (v *volume) Context(ctrlLossTmo int32) map[string]string {
	m := map[string]string{
		export.ContextTransport:     "tcp",
		export.ContextTargetAddress: "127.0.0.1",
		export.ContextTargetPort:    strconv.Itoa(int(v.Port)),
		export.ContextSubsystemNQN:  v.Ident.SubsystemNQN,
	}
	if ctrlLossTmo == 0 {
		ctrlLossTmo = defaultCtrlLossTmo
	}
	m[export.ContextCtrlLossTimeoutSeconds] = strconv.Itoa(int(ctrlLossTmo))
	m[export.ContextReconnectDelaySeconds] = "1"
	return m
}

func mountCap(fs string, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs, MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// staged is one volume staged through a plugin, with its paths.
type staged struct {
	v         *volume
	cap       *csi.VolumeCapability
	Staging   string
	dir       string
	published map[string]bool
	p         *plugin // the plugin that last worked on the volume
	unstaged  bool
}

// defaultCtrlLossTmo keeps a test that fails with a connected controller
// from waiting out the kernel's default ctrl_loss_tmo (600 s) when its
// export is removed at cleanup.
const defaultCtrlLossTmo = 10

func stage(t testing.TB, p *plugin, v *volume, c *csi.VolumeCapability, ctrlLossTmo int32) *staged {
	t.Helper()
	dir := t.TempDir()
	s := &staged{v: v, cap: c, Staging: filepath.Join(dir, "staging"), dir: dir, published: map[string]bool{}, p: p}
	if err := os.Mkdir(s.Staging, 0o750); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := p.Node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{
		VolumeId: v.ID, StagingTargetPath: s.Staging, VolumeCapability: c, VolumeContext: v.Context(ctrlLossTmo),
	})
	// Registered after the export's cleanup, so it runs before it: a
	// failed test still unmounts and disconnects before the export and
	// the LV go. Every step is idempotent.
	t.Cleanup(func() {
		if s.unstaged && len(s.published) == 0 {
			return // the test cleaned up itself
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		for target := range s.published {
			if _, err := s.p.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.ID, TargetPath: target}); err != nil {
				t.Errorf("cleanup: unpublish %s: %v", target, err)
			}
		}
		if _, err := s.p.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.ID, StagingTargetPath: s.Staging}); err != nil {
			t.Errorf("cleanup: unstage %s: %v", v.ID, err)
		}
	})
	if err != nil {
		t.Fatalf("NodeStageVolume %s: %v", v.ID, err)
	}
	t.Logf("staged %s in %v", v.ID, time.Since(start))
	return s
}

func (s *staged) Target(name string) string { return filepath.Join(s.dir, name) }

func (s *staged) publish(t testing.TB, p *plugin, target string, ro bool) {
	t.Helper()
	s.p = p
	_, err := p.Node.NodePublishVolume(ctxT(t), &csi.NodePublishVolumeRequest{
		VolumeId: s.v.ID, StagingTargetPath: s.Staging, TargetPath: target, VolumeCapability: s.cap, Readonly: ro,
	})
	s.published[target] = true
	if err != nil {
		t.Fatalf("NodePublishVolume %s at %s: %v", s.v.ID, target, err)
	}
}

func (s *staged) unpublish(t testing.TB, p *plugin, target string) {
	t.Helper()
	if _, err := p.Node.NodeUnpublishVolume(ctxT(t), &csi.NodeUnpublishVolumeRequest{VolumeId: s.v.ID, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume %s at %s: %v", s.v.ID, target, err)
	}
	delete(s.published, target)
}

func (s *staged) unstage(t testing.TB, p *plugin) {
	t.Helper()
	s.p = p
	if _, err := p.Node.NodeUnstageVolume(ctxT(t), &csi.NodeUnstageVolumeRequest{VolumeId: s.v.ID, StagingTargetPath: s.Staging}); err != nil {
		t.Fatalf("NodeUnstageVolume %s: %v", s.v.ID, err)
	}
	s.unstaged = true
}

// mountSource returns what is mounted at path (the last mount there, which
// is the visible one), from /proc/self/mountinfo: the source device, or
// for a bind mount of a device node (whose source reads "devtmpfs") the
// node itself.
func mountSource(t testing.TB, path string) (string, bool) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, found := "", false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 2 || fields[4] != path {
			continue
		}
		found = true
		src = tail[1]
		if tail[0] == "devtmpfs" {
			src = "/dev" + fields[3]
		}
	}
	return src, found
}

// mountOptions returns the per-mount options of the visible mount at path.
func mountOptions(t testing.TB, path string) []string {
	t.Helper()
	opts, _ := mountInfo(t, path)
	return opts
}

// superOptions are the filesystem's options of the last mount at path
// (mountinfo's super options: what the filesystem took from mount(2)'s
// data, and its defaults).
func superOptions(t testing.TB, path string) []string {
	t.Helper()
	_, super := mountInfo(t, path)
	return super
}

// mountInfo returns the per-mount and the super options of the last
// mount at path in /proc/self/mountinfo.
func mountInfo(t testing.TB, path string) (opts, super []string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 6 && fields[4] == path {
			opts, super = strings.Split(fields[5], ","), nil
			if i := slices.Index(fields, "-"); i > 0 && len(fields) > i+3 {
				super = strings.Split(fields[i+3], ",")
			}
		}
	}
	return opts, super
}

// checkDeviceIdentity fails unless dev is the namespace of v (its sysfs
// uuid is v's).
func checkDeviceIdentity(t testing.TB, dev string, v *volume) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "uuid"))
	if err != nil {
		t.Fatalf("%s: %v", dev, err)
	}
	if got := strings.TrimSpace(string(b)); got != v.Ident.UUID {
		t.Fatalf("%s has uuid %s, volume %s is %s", dev, got, v.ID, v.Ident.UUID)
	}
}
