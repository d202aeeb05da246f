//go:build kernel

package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/agent/server"
	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hostRoot bind-mounts the guest's whole mount tree at a fresh directory,
// as the agent's DaemonSet mounts the host's / at /host, and returns it.
func hostRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/run", "hostroot")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--rbind", "/", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount --rbind / %s: %v: %s", dir, err, out)
	}
	// rslave: what is mounted later on the host shows under dir, as
	// HostToContainer propagation does, and unmounting dir touches no
	// mount of the host.
	if out, err := exec.Command("mount", "--make-rslave", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount --make-rslave %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-R", dir).CombinedOutput(); err != nil {
			t.Errorf("umount -R %s: %v: %s", dir, err, out)
		}
		os.Remove(dir)
	})
	return dir
}

// TestHostRoot: with -host-root the agent runs the host's zfs and lvm
// chrooted into the host's root filesystem, the way its container does,
// and nothing it runs comes from its own PATH. Each store's volume is
// created, exported, expanded, unexported and deleted that way. The same
// agent without a host root finds no tools under the empty PATH, which
// shows the chroot is what found them.
func TestHostRoot(t *testing.T) {
	guest.RequireGuest(t)
	root := hostRoot(t)
	for _, c := range []struct {
		name string
		mk   func(testing.TB) labStore
	}{
		{"zfs-sparse", newZFS},
		{"lvm-thin", func(t testing.TB) labStore { return newLVM(t, true) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.mk(t)
			requireEmptyNvmet(t)
			// The fixtures above ran their tools with the PATH; from here
			// on only the chroot can find them.
			path := os.Getenv("PATH")
			t.Setenv("PATH", filepath.Join(t.TempDir(), "empty"))

			plain := startAgentConfig(t, server.Config{GenerationsDir: t.TempDir()})
			_, err := plain.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tok(fixture.RandomUUID(t), 1),
				VolumeId: "pvc-no-root-" + s.name, Store: s.store, CapacityBytes: 64 * mib})
			if status.Code(err) == codes.OK {
				t.Fatal("without -host-root and with an empty PATH, CreateVolume succeeded: the tools did not come from the host root")
			}
			t.Logf("without a host root: %v", err)
			plain.stop()

			a := startAgentConfig(t, server.Config{GenerationsDir: t.TempDir(), HostRoot: root})
			id := "pvc-root-" + s.name
			tk := tok(fixture.RandomUUID(t), 1)
			port := fixture.FreeTCPPort(t)
			e := mustCreateExport(t, a.c, s, id, tk, port, false)
			if e.GetSubsystemNqn() == "" {
				t.Fatalf("export %v has no subsystem", e)
			}
			if _, err := a.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store, CapacityBytes: 96 * mib}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tk, VolumeId: id}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store}); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", path)
			if _, err := s.backend.Get(ctxT(t), id); err == nil || !backends.IsNotFound(err) {
				t.Errorf("after DeleteVolume: %v", err)
			}
		})
	}
}

// TestLVMRejectDevices: -lvm-reject reaches every lvm command as a
// global_filter that LVM honours. A volume group on a loop device is
// invisible to an agent that rejects ^/dev/loop (its store is not found),
// and in use by one that does not.
func TestLVMRejectDevices(t *testing.T) {
	guest.RequireGuest(t)
	s := newLVM(t, false)
	blind := startAgentConfig(t, server.Config{GenerationsDir: t.TempDir(), LVMRejectDevices: []string{"^/dev/loop"}})
	_, err := blind.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tok(fixture.RandomUUID(t), 1),
		VolumeId: "pvc-hidden", Store: s.store, CapacityBytes: 64 * mib})
	if err == nil || !strings.Contains(err.Error(), s.store.GetLvm().GetVolumeGroup()) {
		t.Fatalf("an agent rejecting /dev/loop* created a volume on a VG of loop devices (or failed without naming it): %v", err)
	}
	t.Logf("rejecting ^/dev/loop: %v", err)
	blind.stop()

	a := startAgentConfig(t, server.Config{GenerationsDir: t.TempDir(), LVMRejectDevices: []string{"^/dev/zd", "^/dev/nvme"}})
	tk := tok(fixture.RandomUUID(t), 1)
	if _, err := a.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: "pvc-seen", Store: s.store, CapacityBytes: 64 * mib}); err != nil {
		t.Fatalf("rejecting only zvols and NVMe devices: %v", err)
	}
	if _, err := a.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: "pvc-seen", Store: s.store}); err != nil {
		t.Fatal(err)
	}
}
