//go:build kernel

package backends

import (
	"context"
	"os"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// zfsParent is the parent dataset of the ZFS stores; it does not exist
// until the first Create makes it.
const zfsParent = "pillar/vols"

// zfsStore is a pool of 512 MiB on a loop device.
func zfsStore(t *testing.T, name string, sparse bool) *store {
	guest.RequireGuest(t)
	pool := fixture.NewZPool(t, fixture.PoolOptions{Size: 512 * fixture.MiB})
	parent := pool.Name + "/" + zfsParent
	rec := newRecorder(t, name, pool.Name, "tank")
	newBackend := func(pool string) func(command.InputRunner) backends.Backend {
		return func(r command.InputRunner) backends.Backend {
			b, err := zfs.New(zfs.Config{Pool: pool, ParentDataset: zfsParent, Sparse: sparse, Runner: r})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	zfsCmd := func(t *testing.T, args ...string) (string, error) {
		return fixture.Command(context.Background(), "zfs", "zfs", args...)
	}
	return &store{
		name:    name,
		unit:    zfs.DefaultVolBlockSize,
		thin:    sparse,
		tooBig:  1 * fixture.GiB,
		backend: newBackend(pool.Name),
		missing: newBackend("pillarnopool"),
		foreign: func(t *testing.T, name string, size int64) {
			if _, err := zfsCmd(t, "create", "-V", strconv.FormatInt(size, 10), "-o", "volblocksize=16k", parent+"/"+name); err != nil {
				t.Fatal(err)
			}
		},
		exists: func(t *testing.T, name string) bool {
			_, err := zfsCmd(t, "list", "-H", "-o", "name", parent+"/"+name)
			return err == nil
		},
		settle: func(t *testing.T) { settleZPool(t, pool.Name) },
		rec:    rec,
	}
}

// settleZPool waits until pool's free space holds still. A destroyed
// dataset's blocks are freed in the background (zpool wait -t free), and
// blocks freed in one transaction group stay allocated for two more (ZFS
// defers their reuse), so one sync leaves up to two groups' frees to come:
// the available figure is read after each sync until a sync leaves it as
// it was.
func settleZPool(t *testing.T, pool string) {
	t.Helper()
	ctx := context.Background()
	run := func(tool string, args ...string) string {
		out, err := fixture.Command(ctx, "settle pool", tool, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	run("zpool", "wait", "-t", "free", pool)
	const most = 10
	last := ""
	for i := range most {
		run("zpool", "sync", pool)
		avail := run("zfs", "get", "-Hp", "-o", "value", "available", pool)
		if avail == last {
			if i > 1 {
				t.Logf("pool %s settled at %s bytes available after %d syncs", pool, avail, i+1)
			}
			return
		}
		last = avail
	}
	t.Fatalf("pool %s: free space still changing after %d syncs (last %s bytes)", pool, most, last)
}

func TestZFSThick(t *testing.T) {
	s := zfsStore(t, "zfs-thick", false)
	conformance(t, s)
}

func TestZFSSparse(t *testing.T) {
	s := zfsStore(t, "zfs-sparse", true)
	conformance(t, s)
}

// TestZFSDeviceWithoutUdev proves how DevicePath finds a zvol in a system
// without udev: there is no /dev/zvol link, only /dev/zdN, which the
// backend finds by dataset name (BLKZNAME) and waits for, since ZFS makes
// the node after zfs create has returned.
func TestZFSDeviceWithoutUdev(t *testing.T) {
	s := zfsStore(t, "zfs-device", true)
	b := s.backend(s.rec)
	ctx := ctxT(t)
	v, err := b.Create(ctx, "pvc-dev", 4*s.unit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Delete(context.Background(), "pvc-dev") })
	dev, err := b.DevicePath(ctx, "pvc-dev")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/dev/zvol"); !os.IsNotExist(err) {
		t.Fatalf("/dev/zvol: %v; the lab's guest has no udev, so ZFS must not have made it", err)
	}
	if !strings.HasPrefix(dev, "/dev/zd") {
		t.Fatalf("device %s, want /dev/zdN", dev)
	}
	if got := deviceSize(t, dev); got != 4*s.unit {
		t.Fatalf("%s: %d bytes, want %d", dev, got, 4*s.unit)
	}
	// volmode=dev: the whole device only, so no partition of it appears
	// on the storage node whatever a tenant writes into it.
	if got := zfsGet(t, v.Name, "volmode"); got != "dev" {
		t.Fatalf("volmode %s, want dev", got)
	}
}

// TestZFSDeviceNodeMadeAgain: the backend remembers which zvol each
// /dev/zdN is (by the disk's diskseq) rather than opening every zvol on
// each lookup. A zvol destroyed and another created gets a node whose
// diskseq is new, even when ZFS gives it the same minor, so the same
// backend finds the new zvol's node and not the old one's.
func TestZFSDeviceNodeMadeAgain(t *testing.T) {
	s := zfsStore(t, "zfs-device-again", true)
	b := s.backend(s.rec)
	ctx := ctxT(t)
	if _, err := b.Create(ctx, "pvc-first", 4*s.unit); err != nil {
		t.Fatal(err)
	}
	first, err := b.DevicePath(ctx, "pvc-first")
	if err != nil {
		t.Fatal(err)
	}
	seq := func(dev string) string {
		t.Helper()
		b, err := os.ReadFile(path.Join("/sys/block", path.Base(dev), "diskseq"))
		if err != nil {
			t.Fatalf("the lab's kernel has a diskseq for every disk: %v", err)
		}
		return strings.TrimSpace(string(b))
	}
	firstSeq := seq(first)
	if err := b.Delete(ctx, "pvc-first"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, "pvc-second", 8*s.unit); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Delete(context.Background(), "pvc-second") })
	second, err := b.DevicePath(ctx, "pvc-second")
	if err != nil {
		t.Fatal(err)
	}
	secondSeq := seq(second)
	t.Logf("pvc-first was %s (diskseq %s), pvc-second is %s (diskseq %s)", first, firstSeq, second, secondSeq)
	if secondSeq == firstSeq {
		t.Fatalf("%s and %s have the same diskseq %s", first, second, firstSeq)
	}
	if got := deviceSize(t, second); got != 8*s.unit {
		t.Fatalf("%s: %d bytes, want pvc-second's %d", second, got, 8*s.unit)
	}
	if _, err := b.DevicePath(ctx, "pvc-first"); !backends.IsNotFound(err) {
		t.Fatalf("DevicePath of the destroyed zvol: %v, want not found", err)
	}
}

// TestZFSConfiguration checks that properties from the configuration are
// applied, that volblocksize becomes the rounding unit, that ownership is
// the user property, and that the parent dataset is made unmountable.
func TestZFSConfiguration(t *testing.T) {
	guest.RequireGuest(t)
	pool := fixture.NewZPool(t, fixture.PoolOptions{Size: 512 * fixture.MiB})
	b, err := zfs.New(zfs.Config{Pool: pool.Name, ParentDataset: "a/b/c",
		Properties: map[string]string{"volblocksize": "8K", "compression": "lz4", "io.example:note": "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	// 10000000 bytes round up to 10002432 with 8 KiB blocks, as zfs
	// create -V itself rounds.
	v, err := b.Create(ctx, "pvc-props", 10_000_000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Delete(context.Background(), "pvc-props") })
	if v.SizeBytes != 10_002_432 || v.Name != pool.Name+"/a/b/c/pvc-props" || v.Thin {
		t.Fatalf("created %+v", *v)
	}
	for prop, want := range map[string]string{
		"volsize": "10002432", "volblocksize": "8192", "compression": "lz4",
		"io.example:note": "kept", zfs.OwnerProperty: "pvc-props", "volmode": "dev",
	} {
		if got := zfsGet(t, v.Name, prop); got != want {
			t.Errorf("%s of %s = %q, want %q", prop, v.Name, got, want)
		}
	}
	if got := zfsGet(t, pool.Name+"/a/b/c", "canmount"); got != "off" {
		t.Errorf("parent dataset canmount=%s, want off", got)
	}
	// A native property ZFS rejects is an invalid argument, not a crash.
	bad, err := zfs.New(zfs.Config{Pool: pool.Name, Properties: map[string]string{"compression": "nope"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Create(ctx, "pvc-bad", 4*zfs.DefaultVolBlockSize)
	mustErr(t, err, backends.ErrInvalidArgument)
}

func zfsGet(t *testing.T, dataset, prop string) string {
	t.Helper()
	out, err := fixture.Command(context.Background(), "zfs get", "zfs", "get", "-Hp", "-o", "value", prop, dataset)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// TestZFSDeleteChannelProgram proves what Delete's channel program
// (backends/zfs/destroy.lua) checks and does on the real kernel, in one
// zfs command: it destroys only a volume whose owner property names the
// volume, refuses a filesystem, a zvol owned by another volume and a zvol
// with a snapshot it did not make (each left as it was), and the zvol's
// device node goes with it. (Snapshots of its own: TestSnapshots*.)
func TestZFSDeleteChannelProgram(t *testing.T) {
	s := zfsStore(t, "zfs-program", true)
	b := s.backend(s.rec)
	ctx := ctxT(t)
	v, err := b.Create(ctx, "pvc-dev", 4*s.unit)
	if err != nil {
		t.Fatal(err)
	}
	// The dataset name of volume name, next to pvc-dev.
	parent := func(name string) string { return path.Dir(v.Name) + "/" + name }
	dev, err := b.DevicePath(ctx, "pvc-dev")
	if err != nil {
		t.Fatal(err)
	}
	zfsRun := func(args ...string) {
		t.Helper()
		if out, err := fixture.Command(context.Background(), "zfs", "zfs", args...); err != nil {
			t.Fatalf("zfs %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	// A filesystem that carries the owner property is not a volume.
	fs := parent("pvc-fs")
	zfsRun("create", "-o", "mountpoint=none", "-o", zfs.OwnerProperty+"=pvc-fs", fs)
	mustErr(t, b.Delete(ctx, "pvc-fs"), backends.ErrConflict)
	if !s.exists(t, "pvc-fs") {
		t.Fatal("the filesystem was destroyed")
	}
	// A zvol whose owner property names another volume.
	other := parent("pvc-other")
	zfsRun("create", "-V", strconv.FormatInt(4*s.unit, 10), "-o", zfs.OwnerProperty+"=pvc-someone-else", other)
	mustErr(t, b.Delete(ctx, "pvc-other"), backends.ErrConflict)
	if !s.exists(t, "pvc-other") {
		t.Fatal("the zvol owned by another volume was destroyed")
	}
	// A zvol of ours with a snapshot someone else took (an operator, a
	// replication tool): refused, both left as they were.
	snap := parent("pvc-dev") + "@keep"
	zfsRun("snapshot", snap)
	mustErr(t, b.Delete(ctx, "pvc-dev"), backends.ErrBusy)
	if !s.exists(t, "pvc-dev") || !s.exists(t, "pvc-dev@keep") {
		t.Fatal("the zvol with a snapshot, or its snapshot, was destroyed")
	}
	zfsRun("destroy", snap)

	// A snapshot of ours is no mark because it inherits the property: one
	// set on the zvol does not make the operator's snapshot ours.
	zfsRun("set", zfs.SnapshotProperty+"=keep", parent("pvc-dev"))
	zfsRun("snapshot", snap)
	mustErr(t, b.(backends.Snapshotter).DeleteSnapshot(ctx, "keep", "pvc-dev"), backends.ErrConflict)
	mustErr(t, b.Delete(ctx, "pvc-dev"), backends.ErrBusy)
	if !s.exists(t, "pvc-dev@keep") {
		t.Fatal("a snapshot that only inherited the snapshot property was destroyed")
	}
	zfsRun("destroy", snap)
	zfsRun("inherit", zfs.SnapshotProperty, parent("pvc-dev"))

	// Ours, without snapshots: destroyed, and its device node removed.
	if err := b.Delete(ctx, "pvc-dev"); err != nil {
		t.Fatal(err)
	}
	if s.exists(t, "pvc-dev") {
		t.Fatal("pvc-dev still exists after Delete")
	}
	fixture.WaitFor(t, dev+" to go with its zvol", 30*time.Second, func() bool {
		_, err := os.Stat(dev)
		return os.IsNotExist(err)
	})
	// Deleting it again finds nothing, which is success.
	if err := b.Delete(ctx, "pvc-dev"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
}
