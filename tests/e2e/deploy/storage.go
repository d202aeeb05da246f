package deploy

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// Storage is the storage node's pools: a zpool and a volume group with a
// thin pool, each on a loop device over a sparse file in the guest's
// tmpfs (ZFS cannot open a tmpfs file as a vdev; a loop device it can).
type Storage struct {
	dir      string
	zfsLoop  string
	lvmLoop  string
	complete bool
}

const (
	// zpoolFileSize holds the 1 GiB claims Kubernetes' volume-expand specs
	// make, grown by another GiB, under the store's overcommit ratio of 1
	// (a 1 GiB pool has ~830 MiB free and refuses them, ResourceExhausted).
	// The file is sparse: the guest's tmpfs holds only what is written.
	zpoolFileSize = 4 << 30
	// The thin pool holds TestSnapshots' claim of 320 MiB, its snapshot,
	// a restore of 448 MiB and a clone under the overcommit ratio of 1,
	// which counts a thin snapshot at its source's size (1408 MiB; a
	// 768 MiB pool refused the restore, ResourceExhausted). Sparse too.
	vgFileSize = 3 << 30
	// thinPoolSize leaves room in vg0 for the thin pool's metadata and
	// for LVM's resize of it.
	thinPoolSize = "2560m"
)

func NewStorage(ctx context.Context, log io.Writer) (*Storage, error) {
	dir, err := os.MkdirTemp("", "pillar-e2e-storage-")
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	s := &Storage{dir: dir}
	fail := func(err error) (*Storage, error) {
		s.Close(log)
		return nil, fmt.Errorf("storage: %w", err)
	}
	if s.zfsLoop, err = loopDevice(ctx, filepath.Join(dir, "zfs.img"), zpoolFileSize); err != nil {
		return fail(err)
	}
	if err := createZpool(ctx, s.zfsLoop); err != nil {
		return fail(err)
	}
	if s.lvmLoop, err = loopDevice(ctx, filepath.Join(dir, "lvm.img"), vgFileSize); err != nil {
		return fail(err)
	}
	if err := createVG(ctx, s.lvmLoop); err != nil {
		return fail(err)
	}
	s.complete = true
	fmt.Fprintf(log, "pillar-e2e: storage: zpool %s on %s, VG %s (thin pool %s) on %s; guest uptime %.1fs, %d MiB used\n",
		ZPool, s.zfsLoop, VG, ThinPool, s.lvmLoop, cluster.Uptime().Seconds(), cluster.MemUsedMiB())
	return s, nil
}

// createZpool creates the pool ZPool on the block device dev.
func createZpool(ctx context.Context, dev string) error {
	_, err := fixture.Command(ctx, "create zpool", "zpool", "create", "-f", "-o", "cachefile=none",
		"-O", "mountpoint=none", ZPool, dev)
	return err
}

// createVG creates the volume group VG with its thin pool ThinPool on the
// block device dev.
func createVG(ctx context.Context, dev string) error {
	for _, args := range [][]string{
		{"pvcreate", "--yes", dev},
		{"vgcreate", "--yes", VG, dev},
		{"lvcreate", "--yes", "--type", "thin-pool", "--size", thinPoolSize, "--name", ThinPool, VG},
	} {
		if _, err := fixture.LVM(ctx, args[0], args[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func loopDevice(ctx context.Context, file string, size int64) (string, error) {
	f, err := os.Create(file)
	if err != nil {
		return "", err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	out, err := fixture.Command(ctx, "attach loop device", "losetup", "--find", "--show", file)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// Close destroys the pools and detaches the loop devices, reporting (not
// failing on) what it could not undo.
func (s *Storage) Close(log io.Writer) {
	ctx := context.Background()
	report := func(err error) {
		if err != nil {
			fmt.Fprintf(log, "pillar-e2e: storage teardown: %v\n", err)
		}
	}
	if s.zfsLoop != "" {
		_, err := fixture.Command(ctx, "destroy zpool", "zpool", "destroy", "-f", ZPool)
		report(err)
	}
	if s.lvmLoop != "" {
		_, err := fixture.LVM(ctx, "vgremove", "--yes", "--force", VG)
		report(err)
		_, err = fixture.LVM(ctx, "pvremove", "--yes", s.lvmLoop)
		report(err)
	}
	for _, d := range []string{s.zfsLoop, s.lvmLoop} {
		if d != "" {
			_, err := fixture.Command(ctx, "detach loop device", "losetup", "-d", d)
			report(err)
		}
	}
	report(os.RemoveAll(s.dir))
}
