//go:build kernel

package node

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/node"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

const mib = fixture.MiB

// xfsSize is above mkfs.xfs's 300 MB floor.
const xfsSize = 320 * mib

func newVG(t *testing.T, size int64) *fixture.VG {
	guest.RequireGuest(t)
	return fixture.NewVG(t, fixture.VGOptions{Size: size})
}

func payload(seed string, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8(sha256.Sum256([]byte(seed))).Read(b)
	return b
}

func TestIdentityAndInfo(t *testing.T) {
	guest.RequireGuest(t)
	h := newHost(t)
	p := startPlugin(t, h, t.TempDir())
	probe, err := p.Identity.Probe(ctxT(t), &csi.ProbeRequest{})
	if err != nil || !probe.GetReady().GetValue() {
		t.Fatalf("Probe in the lab (initiator loaded, tools installed) = %v, %v", probe, err)
	}
	info, err := p.Identity.GetPluginInfo(ctxT(t), &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != "pillar-csi.io" {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	ni, err := p.Node.NodeGetInfo(ctxT(t), &csi.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != "worker-1/"+h.NQN {
		t.Fatalf("NodeGetInfo = %v, %v", ni, err)
	}
}

// TestFilesystemLifecycle: stage, publish rw and ro, write, unpublish,
// unstage (controller gone), restage, read back; stats along the way.
func TestFilesystemLifecycle(t *testing.T) {
	vg := newVG(t, 1*fixture.GiB)
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			p := startPlugin(t, newHost(t), t.TempDir())
			v := exportVolume(t, vg, xfsSize)
			// Mount flags such as a StorageClass's mountOptions: three
			// that are mount(2) flags and one that is the filesystem's
			// own, which reaches it as mount(2)'s data.
			fsOpt := map[string]string{"ext4": "commit=13", "xfs": "logbufs=4"}[fs]
			c := mountCap(fs, "nosuid", "nodev", "noexec", fsOpt)
			s := stage(t, p, v, c, 0)
			if opts, super := mountOptions(t, s.Staging), superOptions(t, s.Staging); !slices.Contains(super, fsOpt) || !slices.Contains(opts, "nosuid") {
				t.Errorf("staging mount %v, filesystem options %v; want nosuid and %s", opts, super, fsOpt)
			} else if slices.Contains(super, "nouuid") != (fs == "xfs") {
				// A clone beside its source has its source's UUID.
				t.Errorf("filesystem options %v: want nouuid on xfs alone", super)
			}

			dev, ok := mountSource(t, s.Staging)
			if !ok {
				t.Fatalf("nothing mounted at %s", s.Staging)
			}
			checkDeviceIdentity(t, dev, v)
			if got := fixture.Controllers(t, v.Ident.SubsystemNQN); len(got) != 1 {
				t.Fatalf("controllers of %s: %v", v.ID, got)
			}
			// A repeated stage is a no-op success.
			if _, err := p.Node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{
				VolumeId: v.ID, StagingTargetPath: s.Staging, VolumeCapability: s.cap, VolumeContext: v.Context(0),
			}); err != nil {
				t.Fatalf("repeated stage: %v", err)
			}

			rw, ro := s.Target("rw"), s.Target("ro")
			s.publish(t, p, rw, false)
			s.publish(t, p, ro, true)
			data := payload(v.ID, 4*int(mib))
			fixture.WriteFile(t, filepath.Join(rw, "payload"), data)
			if err := os.WriteFile(filepath.Join(ro, "nope"), []byte("x"), 0o600); !errors.Is(err, syscall.EROFS) {
				t.Fatalf("write through the read-only publication: %v, want EROFS", err)
			}
			if got, err := os.ReadFile(filepath.Join(ro, "payload")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read through the read-only publication: %v", err)
			}
			// Both publications keep the staging mount's flags; the
			// read-only one gets them back on its remount.
			for tp, want := range map[string][]string{rw: {"rw", "nosuid", "nodev", "noexec"}, ro: {"ro", "nosuid", "nodev", "noexec"}} {
				opts := mountOptions(t, tp)
				for _, o := range want {
					if !slices.Contains(opts, o) {
						t.Errorf("publication %s mounted %v, want %v", tp, opts, want)
						break
					}
				}
			}

			st, err := p.Node.NodeGetVolumeStats(ctxT(t), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: rw})
			if err != nil {
				t.Fatal(err)
			}
			var bytesUsage, inodes *csi.VolumeUsage
			for _, u := range st.GetUsage() {
				switch u.GetUnit() {
				case csi.VolumeUsage_BYTES:
					bytesUsage = u
				case csi.VolumeUsage_INODES:
					inodes = u
				}
			}
			if bytesUsage == nil || inodes == nil || bytesUsage.GetUsed() < int64(len(data)) ||
				bytesUsage.GetTotal() < 250*mib || bytesUsage.GetTotal() > xfsSize || inodes.GetUsed() < 1 {
				t.Fatalf("stats %v: want bytes used ≥ %d of ~%d and inodes", st.GetUsage(), len(data), xfsSize)
			}
			health(t, p, v.ID, rw, "")

			s.unpublish(t, p, rw)
			s.unpublish(t, p, ro)
			s.unpublish(t, p, ro) // idempotent
			for _, tp := range []string{rw, ro} {
				if _, ok := mountSource(t, tp); ok {
					t.Fatalf("%s still mounted", tp)
				}
			}
			s.unstage(t, p)
			if got := fixture.Controllers(t, v.Ident.SubsystemNQN); len(got) != 0 {
				t.Fatalf("controllers left after unstage: %v", got)
			}
			if _, ok := mountSource(t, s.Staging); ok {
				t.Fatal("staging path still mounted")
			}
			s.unstage(t, p) // idempotent

			// Restage: the filesystem is reused, the data is there.
			s = stage(t, p, v, c, 0)
			s.publish(t, p, rw, false)
			if got, err := os.ReadFile(filepath.Join(rw, "payload")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back after restage: %v (equal %v)", err, bytes.Equal(got, data))
			}
			s.unpublish(t, p, rw)
			s.unstage(t, p)
		})
	}
}

// health fails unless NodeGetVolumeHealth reports exactly the reason
// wanted ("" for healthy).
func health(t testing.TB, p *plugin, volumeID, path, reason string) {
	t.Helper()
	h, err := p.Node.NodeGetVolumeHealth(ctxT(t), &csi.NodeGetVolumeHealthRequest{VolumeId: volumeID, VolumePublishPath: path})
	if err != nil {
		t.Fatal(err)
	}
	got := h.GetVolumeHealth().GetHealthStatuses()
	if reason == "" {
		if len(got) != 0 {
			t.Fatalf("healthy volume reported %v", got)
		}
		return
	}
	for _, e := range got {
		if e.GetReason() == reason && e.GetStatus() == csi.VolumeHealthErrorType_INACCESSIBLE {
			t.Logf("health: %v", got)
			return
		}
	}
	t.Fatalf("health %v, want %s", got, reason)
}

func TestBlock(t *testing.T) {
	vg := newVG(t, 256*mib)
	p := startPlugin(t, newHost(t), t.TempDir())
	v := exportVolume(t, vg, 64*mib)
	s := stage(t, p, v, blockCap(), 0)
	if _, ok := mountSource(t, s.Staging); ok {
		t.Fatal("a block volume was mounted at its staging path")
	}
	rw, ro := s.Target("rw"), s.Target("ro")
	s.publish(t, p, rw, false)
	s.publish(t, p, ro, true)
	dev, ok := mountSource(t, rw)
	if !ok {
		t.Fatalf("nothing bound at %s", rw)
	}
	checkDeviceIdentity(t, dev, v)

	data := payload(v.ID, 1*int(mib))
	f, err := os.OpenFile(rw, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 8*mib); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// A read-only bind mount of a device node is advisory (the kernel
	// lets O_RDWR through); the mount must still be read-only.
	if opts := mountOptions(t, ro); !slices.Contains(opts, "ro") {
		t.Fatalf("read-only block publication mounted %v", opts)
	}
	got := make([]byte, len(data))
	rf, err := os.Open(ro)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rf.ReadAt(got, 8*mib); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back through the read-only publication: %v", err)
	}
	rf.Close()

	st, err := p.Node.NodeGetVolumeStats(ctxT(t), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: rw})
	if err != nil || len(st.GetUsage()) != 1 || st.GetUsage()[0].GetTotal() != 64*mib {
		t.Fatalf("block stats %v, %v", st, err)
	}
	s.unpublish(t, p, rw)
	s.unpublish(t, p, ro)
	for _, tp := range []string{rw, ro} {
		if _, err := os.Stat(tp); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("block target %s left behind: %v", tp, err)
		}
	}
	s.unstage(t, p)
	if got := fixture.Controllers(t, v.Ident.SubsystemNQN); len(got) != 0 {
		t.Fatalf("controllers left: %v", got)
	}
	// Reader-only (ReadOnlyMany): the device itself refuses writes.
	rox := blockCap()
	rox.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	s = stage(t, p, v, rox, 0)
	s.cap = rox
	s.publish(t, p, ro, true)
	rf, err = os.Open(ro)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rf.ReadAt(got, 8*mib); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back after restage read-only: %v", err)
	}
	rf.Close()
	if wf, err := os.OpenFile(ro, os.O_RDWR, 0); err == nil {
		_, err = wf.WriteAt(data[:4096], 0)
		wf.Close()
		if !errors.Is(err, syscall.EPERM) {
			t.Fatalf("write to a reader-only block volume: %v, want EPERM", err)
		}
	} else if !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EPERM) {
		t.Fatalf("open a reader-only block volume for writing: %v", err)
	}
	s.unpublish(t, p, ro)
	s.unstage(t, p)

	// The data reached the LV on the target side.
	tf, err := os.Open(v.Device)
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	if err := unix.IoctlSetInt(int(tf.Fd()), unix.BLKFLSBUF, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tf.ReadAt(got, 8*mib); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("target side: %v (equal %v)", err, bytes.Equal(got, data))
	}
}

// TestOnlineExpand grows the LV under a published filesystem, tells nvmet
// (revalidate_size, what pillar-agent does on ControllerExpandVolume) and
// expands on the node.
func TestOnlineExpand(t *testing.T) {
	vg := newVG(t, 1*fixture.GiB)
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			p := startPlugin(t, newHost(t), t.TempDir())
			v := exportVolume(t, vg, xfsSize)
			s := stage(t, p, v, mountCap(fs), 0)
			target := s.Target("mnt")
			s.publish(t, p, target, false)
			before := fsSize(t, target)

			newSize := xfsSize + 128*mib
			if _, err := fixture.LVM(ctxT(t), "lvextend", "--yes", "--size", sizeArg(newSize), v.vg.Name+"/"+v.LV); err != nil {
				t.Fatal(err)
			}
			nsDir := filepath.Join("/sys/kernel/config/nvmet/subsystems", v.Ident.SubsystemNQN, "namespaces", "1")
			if err := os.WriteFile(filepath.Join(nsDir, "revalidate_size"), []byte("1"), 0); err != nil {
				t.Fatalf("revalidate_size: %v", err)
			}
			r, err := p.Node.NodeExpandVolume(ctxT(t), &csi.NodeExpandVolumeRequest{
				VolumeId: v.ID, VolumePath: target, StagingTargetPath: s.Staging,
				CapacityRange: &csi.CapacityRange{RequiredBytes: newSize}, VolumeCapability: s.cap,
			})
			if err != nil {
				t.Fatal(err)
			}
			if r.GetCapacityBytes() != newSize {
				t.Errorf("NodeExpandVolume capacity %d, want %d", r.GetCapacityBytes(), newSize)
			}
			after := fsSize(t, target)
			t.Logf("%s: %d → %d bytes", fs, before, after)
			if after < before+100*mib {
				t.Fatalf("filesystem did not grow: %d → %d", before, after)
			}
			s.unpublish(t, p, target)
			s.unstage(t, p)
		})
	}
}

func sizeArg(n int64) string { return strconv.FormatInt(n, 10) + "b" }

func fsSize(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize
}

// TestUnstageFromRecordAfterRestart: the plugin that staged is gone; a new
// instance unstages from the record alone.
func TestUnstageFromRecordAfterRestart(t *testing.T) {
	vg := newVG(t, 256*mib)
	h, state := newHost(t), t.TempDir()
	p := startPlugin(t, h, state)
	v := exportVolume(t, vg, 64*mib)
	s := stage(t, p, v, mountCap("ext4"), 0)
	p.Stop()

	p2 := startPlugin(t, h, state)
	if _, err := os.Stat(filepath.Join(state, v.ID+".json")); err != nil {
		t.Fatalf("stage record: %v", err)
	}
	s.unstage(t, p2)
	if got := fixture.Controllers(t, v.Ident.SubsystemNQN); len(got) != 0 {
		t.Fatalf("controllers left: %v", got)
	}
	if _, ok := mountSource(t, s.Staging); ok {
		t.Fatal("staging path still mounted")
	}
	if _, err := os.Stat(filepath.Join(state, v.ID+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("record left: %v", err)
	}
}

// TestTargetGone: the export disappears under a published volume; health
// says so, and unpublish and unstage still clean up. ctrl_loss_tmo is
// short, so the kernel gives up reconnecting within seconds.
func TestTargetGone(t *testing.T) {
	vg := newVG(t, 256*mib)
	p := startPlugin(t, newHost(t), t.TempDir())
	v := exportVolume(t, vg, 64*mib)
	const ctrlLossTmo = 3
	s := stage(t, p, v, mountCap("ext4"), ctrlLossTmo)
	target := s.Target("mnt")
	s.publish(t, p, target, false)
	fixture.WriteFile(t, filepath.Join(target, "before"), []byte("data"))
	health(t, p, v.ID, target, "")

	v.Unexport(t)
	fixture.WaitFor(t, "the controller to leave the live state", 30*time.Second, func() bool {
		for _, c := range fixture.Controllers(t, v.Ident.SubsystemNQN) {
			b, _ := os.ReadFile(filepath.Join("/sys/class/nvme", c, "state"))
			if strings.TrimSpace(string(b)) == "live" {
				return false
			}
		}
		return true
	})
	health(t, p, v.ID, target, node.ReasonTargetUnreachable)
	// After ctrl_loss_tmo the kernel deletes the controller and the
	// namespace's block device goes with it.
	fixture.WaitFor(t, "the kernel to give up on the controller", time.Duration(ctrlLossTmo+60)*time.Second, func() bool {
		return len(fixture.Controllers(t, v.Ident.SubsystemNQN)) == 0
	})
	health(t, p, v.ID, target, node.ReasonDeviceGone)

	s.unpublish(t, p, target)
	s.unstage(t, p)
	for _, path := range []string{target, s.Staging} {
		if _, ok := mountSource(t, path); ok {
			t.Fatalf("%s still mounted", path)
		}
	}
}

// TestCorruptedMount shuts the xfs filesystem down under its publication
// (as xfs does itself on a metadata I/O error): stat answers EIO, and
// unpublish and unstage must still unmount.
func TestCorruptedMount(t *testing.T) {
	vg := newVG(t, 512*mib)
	p := startPlugin(t, newHost(t), t.TempDir())
	v := exportVolume(t, vg, xfsSize)
	s := stage(t, p, v, mountCap("xfs"), 0)
	target := s.Target("mnt")
	s.publish(t, p, target, false)
	if _, err := fixture.Command(ctxT(t), "shut down xfs", "xfs_io", "-x", "-c", "shutdown", target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "x")); !errors.Is(err, syscall.EIO) {
		t.Logf("stat in a shut-down xfs: %v", err)
	}
	health(t, p, v.ID, target, node.ReasonCorruptedMount)
	s.unpublish(t, p, target)
	s.unstage(t, p)
	for _, path := range []string{target, s.Staging} {
		if _, ok := mountSource(t, path); ok {
			t.Fatalf("%s still mounted", path)
		}
	}
	if got := fixture.Controllers(t, v.Ident.SubsystemNQN); len(got) != 0 {
		t.Fatalf("controllers left: %v", got)
	}
}

// TestConnectOptions: the host identity and every connect option of the
// volume context reach the kernel's controller.
func TestConnectOptions(t *testing.T) {
	vg := newVG(t, 256*mib)
	h := newHost(t)
	p := startPlugin(t, h, t.TempDir())
	v := exportVolume(t, vg, 64*mib)
	vctx := v.Context(0)
	vctx[export.ContextCtrlLossTimeoutSeconds] = "17"
	vctx[export.ContextReconnectDelaySeconds] = "3"
	vctx[export.ContextKeepAliveTimeoutSeconds] = "7"
	vctx[export.ContextNrIOQueues] = "1"
	vctx[export.ContextQueueSize] = "32"
	dir := t.TempDir()
	s := &staged{v: v, cap: blockCap(), Staging: dir, dir: dir, published: map[string]bool{}, p: p}
	if _, err := p.Node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{
		VolumeId: v.ID, StagingTargetPath: dir, VolumeCapability: blockCap(), VolumeContext: vctx,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !s.unstaged {
			s.unstage(t, p)
		}
	})
	ctrls := fixture.Controllers(t, v.Ident.SubsystemNQN)
	if len(ctrls) != 1 {
		t.Fatalf("controllers %v", ctrls)
	}
	attr := func(name string) string {
		b, err := os.ReadFile(filepath.Join("/sys/class/nvme", ctrls[0], name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return strings.TrimSpace(string(b))
	}
	for name, want := range map[string]string{
		"hostnqn": h.NQN,
		"hostid":  h.ID,
		// The kernel keeps max_reconnects = ceil(17/3) = 6 and shows
		// max_reconnects × reconnect_delay.
		"ctrl_loss_tmo":   "18",
		"reconnect_delay": "3",
		"kato":            "7",
		"queue_count":     "2",  // nr_io_queues + the admin queue
		"sqsize":          "31", // queue_size - 1 (0's based)
		"transport":       "tcp",
	} {
		if got := attr(name); got != want {
			t.Errorf("%s/%s = %q, want %q", ctrls[0], name, got, want)
		}
	}
	s.unstage(t, p)
}
