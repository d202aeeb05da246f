package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof/nvmeoftest"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/stage"
)

const (
	hostNQN = "nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11"
	hostID  = "6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11"
	vol     = "pvc-1"
	gib     = int64(1 << 30)
)

// fakeRunner plays blkid, mkfs and the resize tools on the fake tree's
// device files: a device's content is the filesystem type on it.
type fakeRunner struct {
	mu    sync.Mutex
	calls []string
}

func (r *fakeRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	r.calls = append(r.calls, strings.Join(append([]string{name}, args...), " "))
	r.mu.Unlock()
	last := args[len(args)-1]
	switch name {
	case "blkid":
		b, err := os.ReadFile(last)
		if err != nil {
			return nil, &command.Error{Cmd: args, ExitCode: -1, Err: err}
		}
		if len(b) == 0 {
			return nil, &command.Error{Cmd: append([]string{name}, args...), ExitCode: 2, Err: errors.New("exit status 2")}
		}
		if strings.HasPrefix(string(b), "PTTYPE=") {
			return append(b, '\n'), nil
		}
		return []byte("DEVNAME=" + last + "\nTYPE=" + string(b) + "\n"), nil
	case "mkfs.ext4", "mkfs.xfs":
		return nil, os.WriteFile(last, []byte(strings.TrimPrefix(name, "mkfs.")), 0o600)
	case "resize2fs", "xfs_growfs", "mount", "umount":
		return nil, nil
	}
	return nil, &command.Error{Cmd: args, ExitCode: 127, Err: errors.New("not found")}
}

func (r *fakeRunner) called(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

type env struct {
	t        *testing.T
	fake     *nvmeoftest.Fake
	mounter  *mount.FakeMounter
	run      *fakeRunner
	state    string
	svc      *Service
	dir      string
	readOnly []string // devices set read-only
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, fake: nvmeoftest.New(t), mounter: mount.NewFakeMounter(nil), run: &fakeRunner{}, dir: t.TempDir()}
	e.state = filepath.Join(e.dir, "state")
	e.fake.Export(vol, "192.0.2.10", 4420, gib)
	e.svc = e.newService()
	return e
}

// newService is a fresh plugin process on the same node: same state
// directory, same kernel (fake tree, mount table).
func (e *env) newService() *Service {
	e.t.Helper()
	s, err := New(Config{
		NodeName: "worker-1", HostNQN: hostNQN, HostID: hostID, StateDir: e.state,
		// The test's directory plays kubelet's: staging and target paths
		// are under it, as kubelet's are under /var/lib/kubelet.
		KubeletDir: e.dir,
		Mounter:    e.mounter, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		runner: e.run, initiator: e.fake.Initiator(),
		lookPath:    func(f string) (string, error) { return "/usr/sbin/" + f, nil },
		setReadOnly: func(dev string) error { e.readOnly = append(e.readOnly, dev); return nil },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func volumeContext(volumeID string) map[string]string {
	id, _ := export.For(volumeID)
	return map[string]string{
		export.ContextTransport:              "tcp",
		export.ContextTargetAddress:          "192.0.2.10",
		export.ContextTargetPort:             "4420",
		export.ContextSubsystemNQN:           id.SubsystemNQN,
		export.ContextCtrlLossTimeoutSeconds: "30",
	}
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

func (e *env) staging(volumeID string) string { return filepath.Join(e.dir, "staging", volumeID) }
func (e *env) target(volumeID string) string  { return filepath.Join(e.dir, "pods", volumeID, "mount") }

func (e *env) stageReq(volumeID string, c *csi.VolumeCapability) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{VolumeId: volumeID, StagingTargetPath: e.staging(volumeID), VolumeCapability: c, VolumeContext: volumeContext(volumeID)}
}

func (e *env) stage(volumeID string, c *csi.VolumeCapability) {
	e.t.Helper()
	if _, err := e.svc.NodeStageVolume(context.Background(), e.stageReq(volumeID, c)); err != nil {
		e.t.Fatalf("NodeStageVolume: %v", err)
	}
}

func (e *env) publishReq(volumeID string, c *csi.VolumeCapability, ro bool) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: volumeID, StagingTargetPath: e.staging(volumeID), TargetPath: e.target(volumeID), VolumeCapability: c, Readonly: ro}
}

func (e *env) unstage(s *Service, volumeID string) error {
	_, err := s.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volumeID, StagingTargetPath: e.staging(volumeID)})
	return err
}

func (e *env) mountAt(path string) (mount.MountPoint, bool) {
	for _, mp := range e.mounter.MountPoints {
		if mp.Path == path {
			return mp, true
		}
	}
	return mount.MountPoint{}, false
}

func wantCode(t *testing.T, err error, code codes.Code, substr string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("err = %q, want it to mention %q", err, substr)
	}
}

func TestStageValidation(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		change func(r *csi.NodeStageVolumeRequest)
		want   string
	}{
		{"no volume id", func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "" }, "volume_id"},
		{"bad volume id", func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "../x" }, "volume_id"},
		{"no staging path", func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "" }, "staging_target_path is missing"},
		{"relative staging path", func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "staging/x" }, "not an absolute path"},
		{"dotdot staging path", func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "/var/lib/../../etc" }, "not a clean path"},
		{"root staging path", func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "/" }, "must not be /"},
		{"no capability", func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = nil }, "volume_capability is missing"},
		{"multi writer of a filesystem", func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		}, "access mode MULTI_NODE_MULTI_WRITER is served for raw block volumes only"},
		{"multi-node single writer", func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER
		}, "access mode MULTI_NODE_SINGLE_WRITER is not supported"},
		{"no access type", func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability.AccessType = nil }, "neither mount nor block"},
		{"btrfs", func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = mountCap("btrfs") }, `fs_type "btrfs" is not supported`},
		{"bind flag", func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = mountCap("ext4", "bind") }, `mount flag "bind"`},
		{"comma flag", func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = mountCap("ext4", "noatime,rw") }, "mount flag"},
		{"no context", func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = nil }, "transport is missing"},
		{"bad port", func(r *csi.NodeStageVolumeRequest) { r.VolumeContext[export.ContextTargetPort] = "x" }, "not a TCP port"},
		{"other volume's subsystem", func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = volumeContext("pvc-2") }, "not the subsystem of volume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.stageReq(vol, mountCap("ext4"))
			tc.change(r)
			_, err := e.svc.NodeStageVolume(context.Background(), r)
			wantCode(t, err, codes.InvalidArgument, tc.want)
		})
	}
	if len(e.fake.Connects()) != 0 {
		t.Errorf("invalid requests connected: %v", e.fake.Connects())
	}
	if ents, _ := os.ReadDir(e.state); len(ents) != 0 {
		t.Errorf("invalid requests left records: %v", ents)
	}
}

func TestPublishAndUnpublishValidation(t *testing.T) {
	e := newEnv(t)
	r := e.publishReq(vol, mountCap("ext4"), false)
	r.TargetPath = "relative"
	_, err := e.svc.NodePublishVolume(context.Background(), r)
	wantCode(t, err, codes.InvalidArgument, "target_path")
	_, err = e.svc.NodePublishVolume(context.Background(), e.publishReq(vol, mountCap("ext4"), false))
	wantCode(t, err, codes.FailedPrecondition, "not staged")
	_, err = e.svc.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: "/a/../b"})
	wantCode(t, err, codes.InvalidArgument, "target_path")
	_, err = e.svc.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: vol, VolumePath: "/x"})
	wantCode(t, err, codes.NotFound, "not staged")
}

// TestPathsOutsideKubeletDir: pillar-node is root and privileged, so a
// caller of its socket must not get it to mount over, unmount or remove a
// path kubelet would never choose. Every path outside the kubelet
// directory is InvalidArgument (NotFound for NodeGetVolumeStats, where
// the spec has a path that cannot be the volume's mean "not there"), and
// nothing is connected, mounted or removed.
func TestPathsOutsideKubeletDir(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.stage(vol, mountCap("ext4"))
	if _, err := e.svc.NodePublishVolume(ctx, e.publishReq(vol, mountCap("ext4"), false)); err != nil {
		t.Fatal(err)
	}
	connects, mounts := len(e.fake.Connects()), len(e.mounter.MountPoints)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	const want = "not under the kubelet directory"
	for _, p := range []string{
		victim,
		"/etc",
		e.dir,                                   // kubelet's directory itself
		e.dir + "-sibling/pods/x",               // a prefix of the name, not of the path
		filepath.Join(filepath.Dir(e.dir), "x"), // its parent's other children
	} {
		t.Run(p, func(t *testing.T) {
			sr := e.stageReq("pvc-2", mountCap("ext4"))
			sr.StagingTargetPath = p
			_, err := e.svc.NodeStageVolume(ctx, sr)
			wantCode(t, err, codes.InvalidArgument, "staging_target_path")
			wantCode(t, err, codes.InvalidArgument, want)
			pr := e.publishReq(vol, mountCap("ext4"), false)
			pr.TargetPath = p
			_, err = e.svc.NodePublishVolume(ctx, pr)
			wantCode(t, err, codes.InvalidArgument, "target_path")
			pr = e.publishReq(vol, mountCap("ext4"), false)
			pr.StagingTargetPath = p
			_, err = e.svc.NodePublishVolume(ctx, pr)
			wantCode(t, err, codes.InvalidArgument, want)
			_, err = e.svc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: p})
			wantCode(t, err, codes.InvalidArgument, want)
			_, err = e.svc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: p})
			wantCode(t, err, codes.InvalidArgument, want)
			_, err = e.svc.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: vol, VolumePath: p})
			wantCode(t, err, codes.InvalidArgument, want)
			_, err = e.svc.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: vol, VolumePath: e.target(vol), StagingTargetPath: p})
			wantCode(t, err, codes.InvalidArgument, want)
			_, err = e.svc.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, VolumePublishPath: p})
			wantCode(t, err, codes.InvalidArgument, want)
			_, err = e.svc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: p})
			wantCode(t, err, codes.NotFound, want)
		})
	}
	if n := len(e.fake.Connects()); n != connects {
		t.Errorf("refused requests connected: %v", e.fake.Connects())
	}
	if n := len(e.mounter.MountPoints); n != mounts {
		t.Errorf("refused requests changed the mounts: %v", e.mounter.MountPoints)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("refused unpublish removed %s: %v", victim, err)
	}
	if _, ok := e.mountAt(e.target(vol)); !ok {
		t.Error("refused requests unmounted the real publication")
	}
}

// An empty KubeletDir is kubelet's default directory, not "anywhere".
func TestKubeletDirConfig(t *testing.T) {
	base := Config{NodeName: "worker-1", HostNQN: hostNQN, StateDir: t.TempDir(), Mounter: mount.NewFakeMounter(nil)}
	s, err := New(base)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.KubeletDir != DefaultKubeletDir {
		t.Errorf("default KubeletDir = %q, want %q", s.cfg.KubeletDir, DefaultKubeletDir)
	}
	wantCode(t, s.validPath("target_path", filepath.Join(t.TempDir(), "target")), codes.InvalidArgument, "/var/lib/kubelet")
	if err := s.validPath("target_path", "/var/lib/kubelet/pods/uid/volumes/kubernetes.io~csi/pvc-1/mount"); err != nil {
		t.Errorf("kubelet's own target path refused: %v", err)
	}
	c := base
	c.KubeletDir = "/var/lib/k0s/kubelet/"
	if s, err := New(c); err != nil || s.cfg.KubeletDir != "/var/lib/k0s/kubelet" {
		t.Errorf("trailing slash: %+v, %v", s, err)
	} else if err := s.validPath("staging_target_path", "/var/lib/k0s/kubelet/plugins/kubernetes.io/csi/pillar-csi.io/x/globalmount"); err != nil {
		t.Errorf("staging path under a moved kubelet directory refused: %v", err)
	}
	for _, dir := range []string{"relative/kubelet", "/", "//"} {
		c := base
		c.KubeletDir = dir
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "kubelet directory") {
			t.Errorf("New with KubeletDir %q = %v, want an error", dir, err)
		}
	}
}

func TestMountLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.stage(vol, mountCap("ext4", "noatime"))

	dev := e.fake.Device(vol)
	if got := e.run.called("mkfs.ext4"); len(got) != 1 || !strings.HasSuffix(got[0], dev) {
		t.Fatalf("mkfs calls %v, want one on %s", got, dev)
	}
	mp, ok := e.mountAt(e.staging(vol))
	if !ok || mp.Device != dev || mp.Type != "ext4" || !slices.Contains(mp.Opts, "noatime") {
		t.Fatalf("staging mount %+v (found %v), want %s ext4 noatime", mp, ok, dev)
	}
	opts := e.fake.Connects()
	if len(opts) != 1 || !strings.Contains(opts[0], "hostnqn="+hostNQN) || !strings.Contains(opts[0], "hostid="+hostID) ||
		!strings.Contains(opts[0], "ctrl_loss_tmo=30") || !strings.Contains(opts[0], "traddr=192.0.2.10,trsvcid=4420") {
		t.Fatalf("connect options %v", opts)
	}

	// A repeated stage reuses the controller, the filesystem and the mount.
	e.stage(vol, mountCap("ext4", "noatime"))
	if n := len(e.fake.Connects()); n != 1 {
		t.Errorf("repeated stage connected again (%d connects)", n)
	}
	if n := len(e.run.called("mkfs")); n != 1 {
		t.Errorf("repeated stage ran mkfs again (%d)", n)
	}
	if n := len(e.mounter.MountPoints); n != 1 {
		t.Errorf("repeated stage mounted again: %v", e.mounter.MountPoints)
	}

	// Publish read-write, twice.
	for range 2 {
		if _, err := e.svc.NodePublishVolume(ctx, e.publishReq(vol, mountCap("ext4", "noatime"), false)); err != nil {
			t.Fatal(err)
		}
	}
	mp, ok = e.mountAt(e.target(vol))
	if !ok || mp.Device != dev || !slices.Contains(mp.Opts, "bind") || slices.Contains(mp.Opts, "ro") {
		t.Fatalf("publish mount %+v (found %v)", mp, ok)
	}
	// The same target read-only now is a different publication.
	_, err := e.svc.NodePublishVolume(ctx, e.publishReq(vol, mountCap("ext4", "noatime"), true))
	wantCode(t, err, codes.AlreadyExists, "read-only false")

	for range 2 {
		if _, err := e.svc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: e.target(vol)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := e.mountAt(e.target(vol)); ok {
		t.Fatal("target still mounted")
	}
	if _, err := os.Stat(e.target(vol)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target path not removed: %v", err)
	}

	// Publish read-only.
	if _, err := e.svc.NodePublishVolume(ctx, e.publishReq(vol, mountCap("ext4", "noatime"), true)); err != nil {
		t.Fatal(err)
	}
	if mp, _ := e.mountAt(e.target(vol)); !slices.Contains(mp.Opts, "ro") {
		t.Errorf("read-only publish options %v", mp.Opts)
	}
	if _, err := e.svc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: e.target(vol)}); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if err := e.unstage(e.svc, vol); err != nil {
			t.Fatal(err)
		}
	}
	if len(e.mounter.MountPoints) != 0 || len(e.fake.Controllers(vol)) != 0 {
		t.Fatalf("after unstage: mounts %v, controllers %v", e.mounter.MountPoints, e.fake.Controllers(vol))
	}
	if _, err := os.Stat(filepath.Join(e.state, vol+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record not removed: %v", err)
	}

	// Restage: the filesystem is there now and is not made again.
	e.stage(vol, mountCap("ext4", "noatime"))
	if n := len(e.run.called("mkfs")); n != 1 {
		t.Errorf("restage ran mkfs (%d calls)", n)
	}
}

func TestDeviceFoundByUUIDNotOrder(t *testing.T) {
	e := newEnv(t)
	e.fake.Export("pvc-2", "192.0.2.10", 4420, 2*gib)
	e.stage("pvc-2", mountCap("xfs"))
	e.stage(vol, mountCap("ext4"))
	for _, v := range []string{vol, "pvc-2"} {
		mp, ok := e.mountAt(e.staging(v))
		if !ok || mp.Device != e.fake.Device(v) {
			t.Errorf("%s mounted from %+v, want %s", v, mp, e.fake.Device(v))
		}
		if strings.HasSuffix(mp.Device, "nvme0n1") {
			t.Errorf("%s took the decoy nvme0n1", v)
		}
	}
}

func TestStagingPathHoldingSomethingElse(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(e.staging(vol), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := e.mounter.Mount("/dev/sdz", e.staging(vol), "ext4", nil); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.NodeStageVolume(context.Background(), e.stageReq(vol, mountCap("ext4")))
	wantCode(t, err, codes.FailedPrecondition, "already has /dev/sdz mounted")
	if n := len(e.run.called("mkfs")); n != 0 {
		t.Fatal("mkfs ran")
	}
}

func TestIncompatibleRestageIsAlreadyExists(t *testing.T) {
	e := newEnv(t)
	e.stage(vol, mountCap("ext4"))
	for name, c := range map[string]*csi.VolumeCapability{
		"other fs":    mountCap("xfs"),
		"other flags": mountCap("ext4", "noatime"),
		"block":       blockCap(),
	} {
		_, err := e.svc.NodeStageVolume(context.Background(), e.stageReq(vol, c))
		wantCode(t, err, codes.AlreadyExists, "already staged")
		_ = name
	}
}

func TestNeverReformats(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{"xfs", "holds a xfs filesystem, not ext4"},
		{"PTTYPE=gpt", "holds a gpt partition table"},
	} {
		t.Run(tc.content, func(t *testing.T) {
			e := newEnv(t)
			e.fake.SetContent(vol, tc.content)
			_, err := e.svc.NodeStageVolume(context.Background(), e.stageReq(vol, mountCap("ext4")))
			wantCode(t, err, codes.FailedPrecondition, tc.want)
			if n := len(e.run.called("mkfs")); n != 0 {
				t.Fatal("mkfs ran on a device with a signature")
			}
			if len(e.mounter.MountPoints) != 0 {
				t.Fatal("mounted anyway")
			}
			// The failed stage is unstaged from its record.
			if err := e.unstage(e.svc, vol); err != nil {
				t.Fatal(err)
			}
			if len(e.fake.Controllers(vol)) != 0 {
				t.Error("controller left after unstage of a failed stage")
			}
		})
	}
	// The filesystem asked for is mounted as it is.
	e := newEnv(t)
	e.fake.SetContent(vol, "xfs")
	e.stage(vol, mountCap("xfs"))
	if n := len(e.run.called("mkfs")); n != 0 {
		t.Fatal("mkfs ran on an existing xfs")
	}
}

func TestReadOnlyModeNeverFormats(t *testing.T) {
	e := newEnv(t)
	c := mountCap("ext4")
	c.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	_, err := e.svc.NodeStageVolume(context.Background(), e.stageReq(vol, c))
	wantCode(t, err, codes.FailedPrecondition, "blank and the access mode is read-only")
	if len(e.run.called("mkfs")) != 0 {
		t.Fatal("mkfs ran for a read-only volume")
	}
}

func TestFailedConnectLeavesAnUnstageableRecord(t *testing.T) {
	e := newEnv(t)
	e.fake.FailConnect = syscall.ECONNREFUSED
	_, err := e.svc.NodeStageVolume(context.Background(), e.stageReq(vol, mountCap("ext4")))
	wantCode(t, err, codes.Internal, "connection refused")
	if _, err := os.Stat(filepath.Join(e.state, vol+".json")); err != nil {
		t.Fatalf("no record after a failed stage: %v", err)
	}
	_, err = e.svc.NodePublishVolume(context.Background(), e.publishReq(vol, mountCap("ext4"), false))
	wantCode(t, err, codes.FailedPrecondition, "not staged")
	// Health answers for the stage the CO just tried, and says why it
	// failed; stats do not (the volume is not staged).
	if err := os.MkdirAll(e.staging(vol), 0o750); err != nil {
		t.Fatal(err)
	}
	h, err := e.svc.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: vol, StagingTargetPath: e.staging(vol)})
	if err != nil {
		t.Fatalf("health after a failed stage: %v", err)
	}
	var reasons []string
	for _, entry := range h.GetVolumeHealth().GetHealthStatuses() {
		reasons = append(reasons, entry.GetReason())
	}
	if !slices.Contains(reasons, ReasonTargetUnreachable) || !slices.Contains(reasons, ReasonNotMounted) {
		t.Errorf("health after a failed stage: %v, want %s and %s", reasons, ReasonTargetUnreachable, ReasonNotMounted)
	}
	_, err = e.svc.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: e.staging(vol)})
	wantCode(t, err, codes.NotFound, "not staged")
	if err := e.unstage(e.svc, vol); err != nil {
		t.Fatal(err)
	}
	e.fake.FailConnect = nil
	e.stage(vol, mountCap("ext4"))
}

func TestUnstageFromRecordAfterRestart(t *testing.T) {
	e := newEnv(t)
	e.stage(vol, mountCap("xfs"))
	restarted := e.newService()
	if err := e.unstage(restarted, vol); err != nil {
		t.Fatal(err)
	}
	if len(e.mounter.MountPoints) != 0 || len(e.fake.Controllers(vol)) != 0 {
		t.Fatalf("after unstage by a new instance: mounts %v, controllers %v", e.mounter.MountPoints, e.fake.Controllers(vol))
	}
}

func TestCorruptRecordIsAClearError(t *testing.T) {
	e := newEnv(t)
	e.stage(vol, mountCap("ext4"))
	record := filepath.Join(e.state, vol+".json")
	if err := os.WriteFile(record, []byte(`{"version":1,"volumeID":`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: e.staging(vol)})
	wantCode(t, err, codes.FailedPrecondition, record)
	_, err = e.svc.NodeStageVolume(context.Background(), e.stageReq(vol, mountCap("ext4")))
	wantCode(t, err, codes.FailedPrecondition, record)
	_, err = e.svc.NodePublishVolume(context.Background(), e.publishReq(vol, mountCap("ext4"), false))
	wantCode(t, err, codes.FailedPrecondition, "corrupt stage record")
	_, err = e.svc.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: e.staging(vol)})
	wantCode(t, err, codes.FailedPrecondition, record)
	// Nothing was torn down on the strength of a record nobody can read.
	if len(e.fake.Controllers(vol)) != 1 || len(e.mounter.MountPoints) != 1 {
		t.Fatal("a corrupt record led to teardown")
	}
}

func TestCorruptedMountCountsAsMounted(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.ENOTCONN, syscall.ESTALE, syscall.EACCES} {
		t.Run(errno.Error(), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			e.stage(vol, mountCap("ext4"))
			if _, err := e.svc.NodePublishVolume(ctx, e.publishReq(vol, mountCap("ext4"), false)); err != nil {
				t.Fatal(err)
			}
			e.mounter.MountCheckErrors = map[string]error{
				e.target(vol):  &os.PathError{Op: "stat", Path: e.target(vol), Err: errno},
				e.staging(vol): &os.PathError{Op: "stat", Path: e.staging(vol), Err: errno},
			}
			h, err := e.svc.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, VolumePublishPath: e.target(vol)})
			if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 1 || h.GetVolumeHealth().GetHealthStatuses()[0].GetReason() != ReasonCorruptedMount {
				t.Fatalf("health of a corrupted mount = %v, %v", h, err)
			}
			if _, err := e.svc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: e.target(vol)}); err != nil {
				t.Fatal(err)
			}
			if err := e.unstage(e.svc, vol); err != nil {
				t.Fatal(err)
			}
			var unmounted []string
			for _, a := range e.mounter.GetLog() {
				if a.Action == mount.FakeActionUnmount {
					unmounted = append(unmounted, a.Target)
				}
			}
			if !slices.Equal(unmounted, []string{e.target(vol), e.staging(vol)}) {
				t.Fatalf("unmounted %v, want target then staging", unmounted)
			}
		})
	}
}

func TestBlockLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.stage(vol, blockCap())
	if len(e.run.called("")) != 0 || len(e.mounter.MountPoints) != 0 {
		t.Fatalf("block stage ran %v, mounted %v", e.run.called(""), e.mounter.MountPoints)
	}
	if _, err := e.svc.NodePublishVolume(ctx, e.publishReq(vol, blockCap(), true)); err != nil {
		t.Fatal(err)
	}
	mp, ok := e.mountAt(e.target(vol))
	if !ok || mp.Device != e.fake.Device(vol) || !slices.Contains(mp.Opts, "ro") {
		t.Fatalf("block publish %+v (found %v)", mp, ok)
	}
	if fi, err := os.Stat(e.target(vol)); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("block target is not a file: %v %v", fi, err)
	}
	_, err := e.svc.NodePublishVolume(ctx, e.publishReq(vol, mountCap("ext4"), false))
	wantCode(t, err, codes.InvalidArgument, "staged with block access")

	st, err := e.svc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: e.target(vol)})
	if err != nil || len(st.GetUsage()) != 1 || st.GetUsage()[0].GetTotal() != gib {
		t.Fatalf("block stats %v, %v", st, err)
	}
	e.fake.Grow(vol, 2*gib)
	r, err := e.svc.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: vol, VolumePath: e.target(vol), CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}})
	if err != nil || r.GetCapacityBytes() != 2*gib {
		t.Fatalf("block expand = %v, %v", r, err)
	}
	if len(e.run.called("")) != 0 {
		t.Errorf("block expand ran %v", e.run.called(""))
	}
	if _, err := e.svc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: e.target(vol)}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.target(vol)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("block target file left: %v", err)
	}
	if err := e.unstage(e.svc, vol); err != nil {
		t.Fatal(err)
	}
	if len(e.readOnly) != 0 {
		t.Errorf("a read-write block volume was set read-only: %v", e.readOnly)
	}
	// Reader-only: the device itself is made read-only.
	rox := blockCap()
	rox.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	e.stage(vol, rox)
	if !slices.Equal(e.readOnly, []string{e.fake.Device(vol)}) {
		t.Errorf("reader-only block stage set read-only %v, want %s", e.readOnly, e.fake.Device(vol))
	}
}

func TestExpandFilesystem(t *testing.T) {
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			e := newEnv(t)
			e.stage(vol, mountCap(fs))
			e.fake.Grow(vol, 3*gib)
			r, err := e.svc.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{
				VolumeId: vol, VolumePath: e.target(vol), StagingTargetPath: e.staging(vol),
				CapacityRange: &csi.CapacityRange{RequiredBytes: 3 * gib},
			})
			if err != nil || r.GetCapacityBytes() != 3*gib {
				t.Fatalf("expand = %v, %v", r, err)
			}
			want := "resize2fs " + e.fake.Device(vol)
			if fs == "xfs" {
				want = "xfs_growfs " + e.staging(vol)
			}
			if got := e.run.called(strings.Fields(want)[0]); !slices.Equal(got, []string{want}) {
				t.Errorf("resize calls %v, want %q", got, want)
			}
		})
	}
}

// TestStageGrowsAnExistingFilesystem: a volume restored from a snapshot
// or cloned into a larger size holds a filesystem smaller than its device,
// and no NodeExpandVolume comes for it: staging an existing filesystem
// read-write grows it; a new one, or a read-only stage, is left alone.
func TestStageGrowsAnExistingFilesystem(t *testing.T) {
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			e := newEnv(t)
			tool := map[string]string{"ext4": "resize2fs", "xfs": "xfs_growfs"}[fs]
			e.stage(vol, mountCap(fs))
			if got := e.run.called(tool); len(got) != 0 {
				t.Errorf("a new filesystem was grown: %v", got)
			}
			// A repeated stage finds it mounted and grows it: the retry of
			// a stage whose grow failed.
			e.stage(vol, mountCap(fs))
			if got := e.run.called(tool); len(got) != 1 {
				t.Errorf("grow calls %v at a repeated stage, want one", got)
			}
			if err := e.unstage(e.svc, vol); err != nil {
				t.Fatal(err)
			}
			e.stage(vol, mountCap(fs)) // a new connection: another device
			want := "resize2fs " + e.fake.Device(vol)
			if fs == "xfs" {
				want = "xfs_growfs " + e.staging(vol)
			}
			if got := e.run.called(tool); len(got) != 2 || got[1] != want {
				t.Errorf("grow calls %v at the second stage, want %q last", got, want)
			}
			// xfs mounts without its UUID check: a clone beside its
			// source has the same UUID.
			if mp, ok := e.mountAt(e.staging(vol)); !ok || slices.Contains(mp.Opts, "nouuid") != (fs == "xfs") {
				t.Errorf("staging mount %+v: nouuid only for xfs", mp)
			}
			if err := e.unstage(e.svc, vol); err != nil {
				t.Fatal(err)
			}
			rox := mountCap(fs)
			rox.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
			e.stage(vol, rox)
			if got := e.run.called(tool); len(got) != 2 {
				t.Errorf("a read-only stage grew the filesystem: %v", got)
			}
		})
	}
}

func TestExpandWaitsBounded(t *testing.T) {
	e := newEnv(t)
	e.svc.cfg.ResizeTimeout = 50e6 // 50ms
	e.stage(vol, mountCap("ext4"))
	// The target did not grow: the size never arrives.
	_, err := e.svc.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: vol, VolumePath: e.staging(vol), CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}})
	wantCode(t, err, codes.DeadlineExceeded, "required")
	if len(e.run.called("resize2fs")) != 0 {
		t.Error("resized before the device grew")
	}
}

func TestStatsAndHealth(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.stage(vol, mountCap("ext4"))
	st, err := e.svc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: e.staging(vol)})
	if err != nil || len(st.GetUsage()) != 2 {
		t.Fatalf("stats %v, %v", st, err)
	}
	var units []csi.VolumeUsage_Unit
	for _, u := range st.GetUsage() {
		units = append(units, u.GetUnit())
		if u.GetTotal() <= 0 || u.GetUsed() < 0 || u.GetAvailable() > u.GetTotal() {
			t.Errorf("implausible usage %v", u)
		}
	}
	if !slices.Equal(units, []csi.VolumeUsage_Unit{csi.VolumeUsage_BYTES, csi.VolumeUsage_INODES}) {
		t.Errorf("units %v", units)
	}
	health := func() []*csi.VolumeHealth_VolumeHealthEntry {
		t.Helper()
		h, err := e.svc.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, StagingTargetPath: e.staging(vol)})
		if err != nil {
			t.Fatal(err)
		}
		return h.GetVolumeHealth().GetHealthStatuses()
	}
	if h := health(); len(h) != 0 {
		t.Fatalf("healthy volume reported %v", h)
	}
	e.fake.SetState(vol, "connecting")
	h := health()
	if len(h) != 1 || h[0].GetReason() != ReasonTargetUnreachable || h[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE ||
		!strings.Contains(h[0].GetMessage(), "connecting") {
		t.Fatalf("target gone: %v", h)
	}
	e.fake.SetState(vol, "live")
	if err := e.mounter.Unmount(e.staging(vol)); err != nil {
		t.Fatal(err)
	}
	if h := health(); len(h) != 1 || h[0].GetReason() != ReasonNotMounted {
		t.Fatalf("mount gone: %v", h)
	}
	_, err = e.svc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "pvc-9", VolumePath: e.staging(vol)})
	wantCode(t, err, codes.NotFound, "not staged")
	_, err = e.svc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: filepath.Join(e.dir, "nonexistent")})
	wantCode(t, err, codes.NotFound, "does not exist")
	_, err = e.svc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: "/nonexistent/path"})
	wantCode(t, err, codes.NotFound, "not under the kubelet directory")
}

func TestBusyVolumeIsAborted(t *testing.T) {
	e := newEnv(t)
	unlock, _, ok := e.svc.locks.TryLock(vol, "test")
	if !ok {
		t.Fatal("lock")
	}
	_, err := e.svc.NodeStageVolume(context.Background(), e.stageReq(vol, mountCap("ext4")))
	wantCode(t, err, codes.Aborted, "in progress")
	// Another volume is not held up.
	e.fake.Export("pvc-2", "192.0.2.10", 4420, gib)
	e.stage("pvc-2", mountCap("ext4"))
	unlock()
	e.stage(vol, mountCap("ext4"))
}

func TestInfoCapabilitiesReady(t *testing.T) {
	e := newEnv(t)
	info, err := e.svc.NodeGetInfo(context.Background(), nil)
	if err != nil || info.GetNodeId() != "worker-1/"+hostNQN {
		t.Fatalf("NodeGetInfo = %v, %v", info, err)
	}
	n, err := export.ParseNodeID(info.GetNodeId())
	if err != nil || n.HostNQN != hostNQN {
		t.Fatalf("node ID does not parse: %v", err)
	}
	caps, _ := e.svc.NodeGetCapabilities(context.Background(), nil)
	var got []csi.NodeServiceCapability_RPC_Type
	for _, c := range caps.GetCapabilities() {
		got = append(got, c.GetRpc().GetType())
	}
	for _, want := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("capabilities %v lack %v", got, want)
		}
	}
	if slices.Contains(got, csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER) {
		t.Error("SINGLE_NODE_MULTI_WRITER advertised but not implemented")
	}

	if err := e.svc.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if err := os.Remove(e.fake.Paths().Fabrics); err != nil {
		t.Fatal(err)
	}
	e.svc.cfg.lookPath = func(f string) (string, error) {
		if f == "mkfs.xfs" {
			return "", errors.New(`exec: "mkfs.xfs": executable file not found in $PATH`)
		}
		return f, nil
	}
	err = e.svc.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "modprobe nvme_fabrics") || !strings.Contains(err.Error(), "mkfs.xfs") {
		t.Fatalf("Ready without the initiator and mkfs.xfs = %v", err)
	}
}

func TestNewRejectsBadIdentity(t *testing.T) {
	for _, c := range []Config{
		{NodeName: "", HostNQN: hostNQN, StateDir: t.TempDir()},
		{NodeName: "worker-1", HostNQN: "not-an-nqn", StateDir: t.TempDir()},
		// A host NQN with ',' or '=' matches NQNPattern but would split
		// the controller's lists; the node refuses to report it.
		{NodeName: "worker-1", HostNQN: hostNQN + ",nqn.2014-08.org.x:y", StateDir: t.TempDir()},
		{NodeName: "worker-1", HostNQN: "nqn.2014-08.org.nvmexpress:a=b", StateDir: t.TempDir()},
		{NodeName: "worker-1", HostNQN: hostNQN, StateDir: "relative"},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

func TestReadHostIdentity(t *testing.T) {
	dir := t.TempDir()
	nqnFile, idFile := filepath.Join(dir, "hostnqn"), filepath.Join(dir, "hostid")
	if _, _, err := ReadHostIdentity(nqnFile, idFile); err == nil || !strings.Contains(err.Error(), "nvme gen-hostnqn") {
		t.Fatalf("missing hostnqn: %v", err)
	}
	os.WriteFile(nqnFile, []byte(hostNQN+"\n"), 0o600)
	n, id, err := ReadHostIdentity(nqnFile, idFile)
	if err != nil || n != hostNQN || id != "" {
		t.Fatalf("without hostid: %q %q %v", n, id, err)
	}
	os.WriteFile(idFile, []byte(hostID+"\n"), 0o600)
	if _, id, err := ReadHostIdentity(nqnFile, idFile); err != nil || id != hostID {
		t.Fatalf("with hostid: %q %v", id, err)
	}
	os.WriteFile(idFile, []byte("zzz"), 0o600)
	if _, _, err := ReadHostIdentity(nqnFile, idFile); err == nil {
		t.Fatal("bad hostid accepted")
	}
}

// A command killed at its deadline carries the context's error, as
// command.Exec reports it; the CO gets DeadlineExceeded.
func TestStatusOfCommandDeadline(t *testing.T) {
	err := &command.Error{Cmd: []string{"mkfs.xfs", "/dev/nvme1n1"}, ExitCode: -1,
		Err: errors.Join(errors.New("signal: killed"), context.DeadlineExceeded)}
	wantCode(t, statusOf("prepare filesystem", fmt.Errorf("wrapped: %w", err)), codes.DeadlineExceeded, "mkfs.xfs")
	wantCode(t, statusOf("prepare filesystem", &command.Error{Cmd: []string{"mkfs.xfs"}, ExitCode: 1, Err: errors.New("exit status 1")}), codes.Internal, "mkfs.xfs")
}

// TestMultiNodeWriterCapability: a node stages a volume for writers on
// several nodes as a raw block device, read-write, and never mounts a
// filesystem for them.
func TestMultiNodeWriterCapability(t *testing.T) {
	rwx := &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}
	got, err := validCapability(&csi.VolumeCapability{AccessMode: rwx, AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}})
	if err != nil || got.access != stage.Block || got.readOnly {
		t.Errorf("a raw block volume for writers on several nodes: %+v, %v; want block, read-write", got, err)
	}
	_, err = validCapability(&csi.VolumeCapability{AccessMode: rwx, AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "xfs"}}})
	wantCode(t, err, codes.InvalidArgument, "served for raw block volumes only")
}
