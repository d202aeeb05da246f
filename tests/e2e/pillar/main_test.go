//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// The names deploy/examples uses: the suite applies those files as a user
// would, with only the agent's name and the bind address filled in.
const (
	zpoolName = "tank"
	vgName    = "vg0"
	thinPool  = "thin0"
	namespace = "pillar-csi"
	release   = "pillar-csi"
)

// lab is the run's one cluster, its storage, and the install of the
// driver, shared by every test: a cluster start takes minutes of guest
// time under TCG.
var lab struct {
	root    string
	c       *cluster.Cluster
	storage *storage
	err     error

	installOnce sync.Once
	installErr  error
}

func TestMain(m *testing.M) {
	// Outside the guest, the tests fail through RequireGuest (never skip),
	// so there is nothing to start.
	if guest.InLab() {
		lab.root, lab.err = cluster.RepoRoot()
		if lab.err == nil {
			t0 := time.Now()
			lab.c, lab.err = cluster.Start(context.Background(), cluster.Options{
				BinDir:   filepath.Join(lab.root, "bin"),
				ImageDir: filepath.Join(lab.root, "bin", "images"),
				Log:      os.Stdout,
			})
			if lab.err == nil {
				fmt.Fprintf(os.Stdout, "pillar-e2e: cluster started in %.1fs (guest uptime %.1fs), %d MiB used\n",
					time.Since(t0).Seconds(), cluster.Uptime().Seconds(), cluster.MemUsedMiB())
			}
		}
		if lab.err == nil {
			lab.storage, lab.err = newStorage(context.Background(), os.Stdout)
		}
	}
	code := m.Run()
	fmt.Fprintf(os.Stdout, "pillar-e2e: figures:\n%s", summary())
	if lab.c != nil {
		if code != 0 {
			diagnose(os.Stdout, lab.c)
			lab.c.Dump(os.Stdout)
		}
		fmt.Fprintf(os.Stdout, "pillar-e2e: guest memory in use at the end: %d MiB\n", cluster.MemUsedMiB())
		t0 := time.Now()
		if err := lab.c.Stop(); err != nil {
			fmt.Fprintf(os.Stdout, "cluster: teardown: %v\n", err)
			code = 1
		} else {
			fmt.Fprintf(os.Stdout, "cluster: torn down in %.1fs\n", time.Since(t0).Seconds())
		}
	}
	if lab.storage != nil {
		// What the driver left behind keeps the pool or the VG busy; the
		// tests that delete volumes already check that nothing is left,
		// so this only reports.
		lab.storage.close(os.Stdout)
	}
	os.Exit(code)
}

// setup returns the shared cluster with pillar-csi installed and the
// examples applied, or fails the test.
func setup(t *testing.T) *cluster.Cluster {
	t.Helper()
	c := clusterOnly(t)
	installOnce(c)
	if lab.installErr != nil {
		t.Fatalf("pillar-csi is not installed: %v", lab.installErr)
	}
	return c
}

// installOnce installs the driver the first time it is called. The
// install's record (helm's output, what kubectl get shows at each step)
// goes to the run's output as it happens: an install can take many
// minutes in a busy guest.
func installOnce(c *cluster.Cluster) {
	lab.installOnce.Do(func() {
		lab.installErr = install(context.Background(), c, os.Stdout)
	})
}

// clusterOnly returns the shared cluster (without installing the driver)
// or fails the test.
func clusterOnly(t *testing.T) *cluster.Cluster {
	t.Helper()
	guest.RequireGuest(t)
	if lab.err != nil {
		t.Fatalf("the lab did not start: %v", lab.err)
	}
	if lab.c == nil {
		t.Fatal("the lab cluster did not start")
	}
	return lab.c
}

// storage is the storage node's pools: a zpool and a volume group with a
// thin pool, each on a loop device over a sparse file in the guest's
// tmpfs (ZFS cannot open a tmpfs file as a vdev; a loop device it can).
type storage struct {
	dir      string
	zfsLoop  string
	lvmLoop  string
	complete bool
}

const (
	zpoolFileSize = 1 << 30
	vgFileSize    = 1 << 30
	// thinPoolSize leaves room in vg0 for the thin pool's metadata and
	// for LVM's resize of it.
	thinPoolSize = "768m"
)

func newStorage(ctx context.Context, log io.Writer) (*storage, error) {
	dir, err := os.MkdirTemp("", "pillar-e2e-storage-")
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	s := &storage{dir: dir}
	fail := func(err error) (*storage, error) {
		s.close(log)
		return nil, fmt.Errorf("storage: %w", err)
	}
	if s.zfsLoop, err = loopDevice(ctx, filepath.Join(dir, "zfs.img"), zpoolFileSize); err != nil {
		return fail(err)
	}
	if _, err := fixture.Command(ctx, "create zpool", "zpool", "create", "-f", "-o", "cachefile=none",
		"-O", "mountpoint=none", zpoolName, s.zfsLoop); err != nil {
		return fail(err)
	}
	if s.lvmLoop, err = loopDevice(ctx, filepath.Join(dir, "lvm.img"), vgFileSize); err != nil {
		return fail(err)
	}
	for _, args := range [][]string{
		{"pvcreate", "--yes", s.lvmLoop},
		{"vgcreate", "--yes", vgName, s.lvmLoop},
		{"lvcreate", "--yes", "--type", "thin-pool", "--size", thinPoolSize, "--name", thinPool, vgName},
	} {
		if _, err := fixture.LVM(ctx, args[0], args[1:]...); err != nil {
			return fail(err)
		}
	}
	s.complete = true
	fmt.Fprintf(log, "pillar-e2e: storage: zpool %s on %s, VG %s (thin pool %s) on %s; guest uptime %.1fs, %d MiB used\n",
		zpoolName, s.zfsLoop, vgName, thinPool, s.lvmLoop, cluster.Uptime().Seconds(), cluster.MemUsedMiB())
	return s, nil
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

// close destroys the pools and detaches the loop devices, reporting (not
// failing on) what it could not undo.
func (s *storage) close(log io.Writer) {
	ctx := context.Background()
	report := func(err error) {
		if err != nil {
			fmt.Fprintf(log, "pillar-e2e: storage teardown: %v\n", err)
		}
	}
	if s.zfsLoop != "" {
		_, err := fixture.Command(ctx, "destroy zpool", "zpool", "destroy", "-f", zpoolName)
		report(err)
	}
	if s.lvmLoop != "" {
		_, err := fixture.LVM(ctx, "vgremove", "--yes", "--force", vgName)
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
