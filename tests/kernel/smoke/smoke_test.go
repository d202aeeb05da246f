//go:build kernel

package smoke

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// volumeSize is above mkfs.xfs's 300 MB floor.
const volumeSize = 320 * fixture.MiB

// payloadSize is the checksummed file written through the initiator.
const payloadSize = 4 * fixture.MiB

var filesystems = []string{"ext4", "xfs"}

func TestSmoke(t *testing.T) {
	guest.RequireGuest(t)
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 1 * fixture.GiB, ThinPoolSize: 512 * fixture.MiB})
	pool := fixture.NewZPool(t, fixture.PoolOptions{Size: 1 * fixture.GiB})

	for _, v := range []struct {
		name   string
		create func(t *testing.T) string
	}{
		{"lvm-linear", func(t *testing.T) string { return vg.CreateLinear(t, "linear", volumeSize) }},
		// The thin LV is larger than its pool's free space would allow a
		// thick one: thin provisioning is what is being exercised.
		{"lvm-thin", func(t *testing.T) string { return vg.CreateThin(t, "thin", volumeSize) }},
		{"zfs-thick", func(t *testing.T) string { return pool.CreateZvol(t, "thick", volumeSize, false).Device }},
		{"zfs-sparse", func(t *testing.T) string { return pool.CreateZvol(t, "sparse", volumeSize, true).Device }},
	} {
		t.Run(v.name, func(t *testing.T) {
			dev := v.create(t)
			if got := deviceSize(t, dev); got < volumeSize {
				t.Fatalf("%s is %d bytes, want at least %d", dev, got, volumeSize)
			}
			for _, fs := range filesystems {
				t.Run(fs, func(t *testing.T) { roundTrip(t, v.name, dev, fs) })
			}
		})
	}
}

// roundTrip exports dev, writes a checksummed file through the NVMe/TCP
// initiator on a fresh fs, tears everything down and checks the file on
// the target side.
func roundTrip(t *testing.T, name, dev, fs string) {
	e := exportDevice(t, dev, name+"-"+fs)
	c := fixture.MustConnect(t, fixture.Connection{Port: e.Port, NQN: e.NQN})
	ndev := fixture.NamespaceByUUID(t, e.UUID)
	nguid, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(ndev), "nguid"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(nguid)); !strings.EqualFold(got, e.NGUID) {
		t.Fatalf("%s: nguid %s, exported %s", ndev, got, e.NGUID)
	}
	if got, want := deviceSize(t, ndev), deviceSize(t, dev); got != want {
		t.Fatalf("namespace %s is %d bytes, the exported %s is %d", ndev, got, dev, want)
	}

	mkfs(t, fs, ndev)
	mnt := t.TempDir()
	mount(t, ndev, mnt, fs, 0)
	payload := make([]byte, payloadSize)
	rand.NewChaCha8(sha256.Sum256([]byte(name + "/" + fs))).Read(payload)
	want := sha256.Sum256(payload)
	fixture.WriteFile(t, filepath.Join(mnt, "payload"), payload)
	unmount(t, mnt)
	c.Disconnect(t)
	waitGone(t, ndev)
	e.unexport(t)

	fixture.FlushBuffers(t, dev)
	mount(t, dev, mnt, fs, syscall.MS_RDONLY)
	got, err := os.ReadFile(filepath.Join(mnt, "payload"))
	if err != nil {
		t.Fatalf("read back on the target: %v", err)
	}
	unmount(t, mnt)
	if sum := sha256.Sum256(got); sum != want || !bytes.Equal(got, payload) {
		t.Fatalf("target side of %s (%s): payload sha256 %x, wrote %x", name, fs, sum, want)
	}
}

func mkfs(t *testing.T, fs, dev string) {
	t.Helper()
	var err error
	switch fs {
	case "ext4":
		_, err = fixture.Command(context.Background(), "mkfs", "mkfs.ext4", "-F", "-q", dev)
	case "xfs":
		_, err = fixture.Command(context.Background(), "mkfs", "mkfs.xfs", "-f", "-q", dev)
	default:
		t.Fatalf("unknown filesystem %q", fs)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func mount(t *testing.T, dev, dir, fs string, flags uintptr) {
	t.Helper()
	if err := syscall.Mount(dev, dir, fs, flags, ""); err != nil {
		t.Fatalf("mount %s on %s (%s): %v", dev, dir, fs, err)
	}
	t.Cleanup(func() {
		// Already unmounted on the success path.
		if err := syscall.Unmount(dir, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

func unmount(t *testing.T, dir string) {
	t.Helper()
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatalf("unmount %s: %v", dir, err)
	}
}

func deviceSize(t *testing.T, dev string) int64 {
	t.Helper()
	n, err := fixture.DeviceSize(dev)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
