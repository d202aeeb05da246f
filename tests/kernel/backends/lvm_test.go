//go:build kernel

package backends

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// extent is LVM's default extent size.
const extent = 4 * fixture.MiB

// lvmStore is a volume group of 1 GiB on a loop device with a thin pool of
// 256 MiB; thin selects whether volumes go into the pool.
func lvmStore(t *testing.T, name string, thin bool) (*store, *fixture.VG) {
	guest.RequireGuest(t)
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 1 * fixture.GiB, ThinPoolSize: 256 * fixture.MiB})
	pool := ""
	if thin {
		pool = vg.ThinPool
	}
	rec := newRecorder(t, name, vg.Name, "vg0")
	newBackend := func(vgName string) func(command.InputRunner) backends.Backend {
		return func(r command.InputRunner) backends.Backend {
			b, err := lvm.New(lvm.Config{VolumeGroup: vgName, ThinPool: pool, Runner: r})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	return &store{
		name:    name,
		unit:    extent,
		thin:    thin,
		tooBig:  2 * fixture.GiB,
		backend: newBackend(vg.Name),
		missing: newBackend("pillarnovg"),
		foreign: func(t *testing.T, name string, size int64) {
			args := []string{"--yes", "--name", name, "--size", strconv.FormatInt(size, 10) + "b", vg.Name}
			if thin {
				args = []string{"--yes", "--name", name, "--virtualsize", strconv.FormatInt(size, 10) + "b", "--thinpool", vg.ThinPool, vg.Name}
			}
			if _, err := fixture.LVM(context.Background(), "lvcreate", args...); err != nil {
				t.Fatal(err)
			}
		},
		exists: func(t *testing.T, name string) bool {
			_, err := fixture.LVM(context.Background(), "lvs", vg.Name+"/"+name)
			return err == nil
		},
		rec: rec,
	}, vg
}

func TestLVMLinear(t *testing.T) {
	s, _ := lvmStore(t, "lvm-linear", false)
	conformance(t, s)
}

func TestLVMThin(t *testing.T) {
	s, _ := lvmStore(t, "lvm-thin", true)
	conformance(t, s)
}

// TestLVMDeviceNode proves which device path exists without udev and that
// DevicePath brings it back: LVM with udev_rules=0 makes /dev/mapper/VG-LV
// itself; the node is gone while the LV is inactive (DevicePath activates
// it) and a node removed by someone else is made again (vgmknodes).
func TestLVMDeviceNode(t *testing.T) {
	s, vg := lvmStore(t, "lvm-device", true)
	b := s.backend(s.rec)
	ctx := ctxT(t)
	if _, err := b.Create(ctx, "pvc-node", 2*extent); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Delete(context.Background(), "pvc-node") })
	s.rec.step("device-path")
	dev, err := b.DevicePath(ctx, "pvc-node")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/dev/mapper/" + vg.Name + "-pvc--node"; dev != want {
		t.Fatalf("device %s, want %s", dev, want)
	}
	deviceSize(t, dev)

	s.rec.step("")
	if _, err := fixture.LVM(ctx, "lvchange", "--activate", "n", vg.Name+"/pvc-node"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dev); !os.IsNotExist(err) {
		t.Fatalf("%s of an inactive LV: %v, want it gone", dev, err)
	}
	s.rec.step("device-path-inactive")
	if got, err := b.DevicePath(ctx, "pvc-node"); err != nil || got != dev {
		t.Fatalf("DevicePath of an inactive LV = %q, %v; want %s", got, err, dev)
	}
	if got := deviceSize(t, dev); got != 2*extent {
		t.Fatalf("%s: %d bytes after activation", dev, got)
	}

	s.rec.step("")
	if err := os.Remove(dev); err != nil {
		t.Fatal(err)
	}
	s.rec.step("device-path-lost-node")
	if got, err := b.DevicePath(ctx, "pvc-node"); err != nil || got != dev {
		t.Fatalf("DevicePath after its node was removed = %q, %v; want %s", got, err, dev)
	}
	s.rec.step("")
	deviceSize(t, dev)
}

// TestLVMNames covers IDs that cannot be LV names as they are: LVM
// reserves names starting with "snapshot" and "pvmove". They get a hashed
// name and work like any other.
func TestLVMNames(t *testing.T) {
	s, vg := lvmStore(t, "lvm-names", false)
	b := s.backend(s.rec)
	ctx := ctxT(t)
	for _, c := range []struct{ id, label string }{{"snapshot-1", "create-snapshot"}, {"pvmove.2", "create-pvmove"}} {
		id := c.id
		s.rec.step(c.label)
		v, err := b.Create(ctx, id, extent)
		if err != nil {
			t.Fatal(err)
		}
		s.rec.step("")
		if want := vg.Name + "/" + lvm.LVName(vg.Name, id); v.Name != want || !strings.Contains(v.Name, "/pillar_") {
			t.Fatalf("%s is %s, want the hashed %s", id, v.Name, want)
		}
		if _, err := b.DevicePath(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	vs, err := b.List(ctx)
	if err != nil || len(vs) != 2 || vs[0].ID != "pvmove.2" || vs[1].ID != "snapshot-1" {
		t.Fatalf("List = %+v, %v", vs, err)
	}
	for _, v := range vs {
		if err := b.Delete(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLVMMissingThinPool: a volume group without the configured thin pool
// is a missing store, not a missing volume.
func TestLVMMissingThinPool(t *testing.T) {
	_, vg := lvmStore(t, "lvm-no-pool", false)
	b, err := lvm.New(lvm.Config{VolumeGroup: vg.Name, ThinPool: "nopool"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Create(ctxT(t), "pvc-x", extent)
	mustErr(t, err, backends.ErrStoreNotFound)
	_, err = b.Capacity(ctxT(t))
	mustErr(t, err, backends.ErrStoreNotFound)
}
