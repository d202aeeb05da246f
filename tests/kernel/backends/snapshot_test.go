//go:build kernel

package backends

import (
	"bytes"
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// snapStore is a store under the snapshot scenario: its backend, and a
// raw listing of everything in it (datasets and snapshots under the
// parent, or LVs other than the thin pool), to prove nothing is left.
type snapStore struct {
	*store
	raw func(t *testing.T) []string
	// foreignSnapshot takes a snapshot of volume id's backend object with
	// the raw tools, without an ownership mark, named name;
	// removeForeign removes it.
	foreignSnapshot, removeForeign func(t *testing.T, id, name string)
}

func zfsSnapStore(t *testing.T, name string, sparse bool) *snapStore {
	s := zfsStore(t, name, sparse)
	b := s.backend(s.rec)
	// The parent dataset exists from the first Create on.
	v, err := b.Create(ctxT(t), "pvc-probe", s.unit)
	if err != nil {
		t.Fatal(err)
	}
	parent := v.Name[:strings.LastIndex(v.Name, "/")]
	if err := b.Delete(ctxT(t), "pvc-probe"); err != nil {
		t.Fatal(err)
	}
	return &snapStore{store: s,
		raw: func(t *testing.T) []string {
			out, err := fixture.Command(context.Background(), "zfs list", "zfs", "list", "-H", "-t", "all", "-r", "-o", "name", parent)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, l := range strings.Fields(out) {
				if l != parent {
					names = append(names, strings.TrimPrefix(l, parent+"/"))
				}
			}
			return names
		},
		foreignSnapshot: func(t *testing.T, id, name string) {
			if _, err := fixture.Command(context.Background(), "zfs snapshot", "zfs", "snapshot", parent+"/"+id+"@"+name); err != nil {
				t.Fatal(err)
			}
		},
		removeForeign: func(t *testing.T, id, name string) {
			if _, err := fixture.Command(context.Background(), "zfs destroy", "zfs", "destroy", parent+"/"+id+"@"+name); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func lvmSnapStore(t *testing.T, name string, thin bool) *snapStore {
	s, vg := lvmStore(t, name, thin)
	return &snapStore{store: s,
		raw: func(t *testing.T) []string {
			out, err := fixture.LVM(context.Background(), "lvs", "--noheadings", "-o", "lv_name", vg.Name)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, l := range strings.Fields(out) {
				if l != vg.ThinPool {
					names = append(names, l)
				}
			}
			return names
		},
		foreignSnapshot: func(t *testing.T, id, name string) {
			if _, err := fixture.LVM(context.Background(), "lvcreate", "--yes", "--snapshot", "--name", name, vg.Name+"/"+id); err != nil {
				t.Fatal(err)
			}
		},
		removeForeign: func(t *testing.T, _, name string) {
			if _, err := fixture.LVM(context.Background(), "lvremove", "--yes", vg.Name+"/"+name); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestSnapshotsZFSSparse(t *testing.T) {
	snapshotScenario(t, zfsSnapStore(t, "zfs-sparse-snapshots", true))
}
func TestSnapshotsZFSThick(t *testing.T) {
	snapshotScenario(t, zfsSnapStore(t, "zfs-thick-snapshots", false))
}
func TestSnapshotsLVMThin(t *testing.T) {
	snapshotScenario(t, lvmSnapStore(t, "lvm-thin-snapshots", true))
}

// TestSnapshotsLVMLinear: a linear store refuses every snapshot and clone
// call with ErrUnsupported, naming its type, and makes nothing.
func TestSnapshotsLVMLinear(t *testing.T) {
	s := lvmSnapStore(t, "lvm-linear-snapshots", false)
	b := s.backend(s.rec)
	ctx := ctxT(t)
	if _, err := b.Create(ctx, "pvc-src", 4*s.unit); err != nil {
		t.Fatal(err)
	}
	sn := b.(backends.Snapshotter)
	_, err := sn.CreateSnapshot(ctx, "snap-1", "pvc-src")
	mustErr(t, err, backends.ErrUnsupported)
	if !strings.Contains(err.Error(), "linear") {
		t.Errorf("the refusal does not name the store's type: %v", err)
	}
	_, err = sn.CreateFromVolume(ctx, "pvc-clone", "pvc-src", 4*s.unit)
	mustErr(t, err, backends.ErrUnsupported)
	_, err = sn.CreateFromSnapshot(ctx, "pvc-restore", "snap-1", "pvc-src", 4*s.unit)
	mustErr(t, err, backends.ErrUnsupported)
	_, err = sn.ListSnapshots(ctx)
	mustErr(t, err, backends.ErrUnsupported)
	mustErr(t, sn.DeleteSnapshot(ctx, "snap-1", "pvc-src"), backends.ErrUnsupported)
	if got := s.raw(t); !slices.Equal(got, []string{"pvc-src"}) {
		t.Errorf("LVs after the refused calls: %v", got)
	}
}

// snapshotScenario proves on the real kernel: a snapshot keeps the bytes
// the volume had, a restore reads them, a clone reads the source's bytes
// at clone time (grown past them it reads zeroes), a restore smaller than
// its snapshot is refused; the source, its snapshot and the volumes made
// from them can be deleted in every order, each vanishing at once, and
// nothing is left on the store after the last; a snapshot nobody owns is
// never deleted.
func snapshotScenario(t *testing.T, s *snapStore) {
	b := s.backend(s.rec)
	sn, ok := b.(backends.Snapshotter)
	if !ok {
		t.Fatalf("%T is no Snapshotter", b)
	}
	// The whole scenario: it runs minutes under TCG.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// 16 MiB of LVM's 4 MiB extents (the thin pool holds 256 MiB, which
	// every thin LV is promised in full), 1 MiB of ZFS's 16 KiB blocks.
	size := 4 * s.unit
	if s.unit < mib {
		size = 64 * s.unit
	}
	fill := func(id string, seed byte, n int64) []byte {
		t.Helper()
		dev, err := b.DevicePath(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte{seed}, int(n))
		for i := range data {
			data[i] ^= byte(i / 4096)
		}
		fixture.WriteAt(t, dev, 0, data)
		return data
	}
	read := func(id string, n int64) []byte {
		t.Helper()
		dev, err := b.DevicePath(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return fixture.ReadAt(t, dev, 0, int(n))
	}
	same := func(what string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, sha256 %x; want %x", what, len(got), sha256.Sum256(got), sha256.Sum256(want))
		}
	}
	listed := func() []string {
		t.Helper()
		ss, err := sn.ListSnapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range ss {
			out = append(out, x.SourceID+"/"+x.ID)
		}
		return out
	}
	volumes := func() []string {
		t.Helper()
		vs, err := b.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vs {
			out = append(out, v.ID)
		}
		return out
	}
	// Content: snapshot, restore, clone.
	if _, err := b.Create(ctx, "pvc-src", size); err != nil {
		t.Fatal(err)
	}
	first := fill("pvc-src", 'A', size)
	snap, err := sn.CreateSnapshot(ctx, "snap-1", "pvc-src")
	if err != nil {
		t.Fatal(err)
	}
	if snap.ID != "snap-1" || snap.SourceID != "pvc-src" || snap.SizeBytes != size || snap.CreationTime.IsZero() {
		t.Fatalf("snapshot %+v", *snap)
	}
	again, err := sn.CreateSnapshot(ctx, "snap-1", "pvc-src")
	if err != nil || *again != *snap {
		t.Fatalf("CreateSnapshot again: %+v, %v; want %+v", again, err, *snap)
	}
	second := fill("pvc-src", 'B', size)
	if _, err := sn.CreateFromSnapshot(ctx, "pvc-small", "snap-1", "pvc-src", size-s.unit); !backends.IsShrink(err) {
		t.Fatalf("restore smaller than the snapshot: %v, want ErrShrink", err)
	}
	if _, err := sn.CreateFromSnapshot(ctx, "pvc-restore", "snap-404", "pvc-src", size); !backends.IsNotFound(err) {
		t.Fatalf("restore of a missing snapshot: %v, want ErrNotFound", err)
	}
	r, err := sn.CreateFromSnapshot(ctx, "pvc-restore", "snap-1", "pvc-src", size)
	if err != nil {
		t.Fatal(err)
	}
	if r.SizeBytes != size {
		t.Fatalf("restore of %d bytes, want %d", r.SizeBytes, size)
	}
	same("the restore", read("pvc-restore", size), first)
	if r2, err := sn.CreateFromSnapshot(ctx, "pvc-restore", "snap-1", "pvc-src", size); err != nil || r2.SizeBytes != size {
		t.Fatalf("CreateFromSnapshot again: %+v, %v", r2, err)
	}
	c, err := sn.CreateFromVolume(ctx, "pvc-clone", "pvc-src", 2*size)
	if err != nil {
		t.Fatal(err)
	}
	if c.SizeBytes != 2*size {
		t.Fatalf("clone of %d bytes, want %d", c.SizeBytes, 2*size)
	}
	got := read("pvc-clone", 2*size)
	same("the clone", got[:size], second)
	same("the clone's growth", got[size:], make([]byte, size))
	if got := listed(); !slices.Equal(got, []string{"pvc-src/snap-1"}) {
		t.Fatalf("ListSnapshots: %v; want only pvc-src/snap-1 (a clone's own snapshot is never listed)", got)
	}
	// Writes to the clone and the restore reach neither the source nor
	// the snapshot.
	fill("pvc-clone", 'C', size)
	fill("pvc-restore", 'R', size)
	same("the source after its clone was written", read("pvc-src", size), second)
	r3, err := sn.CreateFromSnapshot(ctx, "pvc-restore-2", "snap-1", "pvc-src", size)
	if err != nil {
		t.Fatal(err)
	}
	same("a second restore", read(r3.ID, size), first)

	// A snapshot nobody owns is neither listed nor deleted.
	s.foreignSnapshot(t, "pvc-src", "foreign-snap")
	mustErr(t, sn.DeleteSnapshot(ctx, "foreign-snap", "pvc-src"), backends.ErrConflict)
	if got := listed(); !slices.Equal(got, []string{"pvc-src/snap-1"}) {
		t.Fatalf("ListSnapshots with a foreign snapshot: %v", got)
	}
	if got := volumes(); slices.Contains(got, "foreign-snap") || len(got) != 4 {
		t.Fatalf("List with a foreign snapshot: %v; want the source, two restores and the clone", got)
	}
	s.removeForeign(t, "pvc-src", "foreign-snap")

	// Order 1: the source first, then its snapshot, then the volumes made
	// from them. A snapshot outlives its source and can still be restored.
	restored, cloned := bytes.Clone(read("pvc-restore", size)), bytes.Clone(read("pvc-clone", size))
	deleteVolume(t, b, "pvc-src")
	if got := volumes(); slices.Contains(got, "pvc-src") {
		t.Fatalf("List after the source's delete: %v", got)
	}
	if got := listed(); !slices.Equal(got, []string{"pvc-src/snap-1"}) {
		t.Fatalf("ListSnapshots after the source's delete: %v", got)
	}
	if _, err := sn.CreateFromSnapshot(ctx, "pvc-restore-3", "snap-1", "pvc-src", size); err != nil {
		t.Fatalf("restoring the snapshot of a deleted volume: %v", err)
	}
	same("a restore of a deleted volume's snapshot", read("pvc-restore-3", size), first)
	same("the restore after its source's delete", read("pvc-restore", size), restored)
	same("the clone after its source's delete", read("pvc-clone", size), cloned)
	deleteSnapshot(t, sn, "snap-1", "pvc-src")
	if got := listed(); len(got) != 0 {
		t.Fatalf("ListSnapshots after the snapshot's delete: %v", got)
	}
	same("the restore after its snapshot's delete", read("pvc-restore", size), restored)
	same("the second restore after its snapshot's delete", read("pvc-restore-2", size), first)
	t.Logf("order 1, on the store once source and snapshot are deleted: %v", s.raw(t))
	for _, id := range []string{"pvc-restore", "pvc-restore-2", "pvc-restore-3", "pvc-clone"} {
		deleteVolume(t, b, id)
	}
	gone(t, s, "order 1 (source, snapshot, restores, clone)")

	// Order 2: the snapshot first, then its restore, then the source.
	mk := func(src, snapID, restore string, seed byte) []byte {
		t.Helper()
		if _, err := b.Create(ctx, src, size); err != nil {
			t.Fatal(err)
		}
		data := fill(src, seed, size)
		if _, err := sn.CreateSnapshot(ctx, snapID, src); err != nil {
			t.Fatal(err)
		}
		if _, err := sn.CreateFromSnapshot(ctx, restore, snapID, src, size); err != nil {
			t.Fatal(err)
		}
		fill(src, seed+1, size)
		return data
	}
	data := mk("pvc-src-2", "snap-2", "pvc-restore-4", 'D')
	deleteSnapshot(t, sn, "snap-2", "pvc-src-2")
	same("a restore after its snapshot's delete", read("pvc-restore-4", size), data)
	deleteVolume(t, b, "pvc-restore-4")
	deleteVolume(t, b, "pvc-src-2")
	gone(t, s, "order 2 (snapshot, restore, source)")

	// Order 3: the restore first, then the source, then the snapshot.
	mk("pvc-src-3", "snap-3", "pvc-restore-5", 'E')
	deleteVolume(t, b, "pvc-restore-5")
	deleteVolume(t, b, "pvc-src-3")
	if got := listed(); !slices.Equal(got, []string{"pvc-src-3/snap-3"}) {
		t.Fatalf("ListSnapshots after its restore's and source's deletes: %v", got)
	}
	deleteSnapshot(t, sn, "snap-3", "pvc-src-3")
	gone(t, s, "order 3 (restore, source, snapshot)")

	// Order 4: a clone's source, then the clone.
	if _, err := b.Create(ctx, "pvc-src-4", size); err != nil {
		t.Fatal(err)
	}
	data = fill("pvc-src-4", 'F', size)
	if _, err := sn.CreateFromVolume(ctx, "pvc-clone-2", "pvc-src-4", size); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, "pvc-src-4")
	same("a clone after its source's delete", read("pvc-clone-2", size), data)
	deleteVolume(t, b, "pvc-clone-2")
	gone(t, s, "order 4 (source, clone)")
}

// deleteVolume deletes a volume twice (the second finds nothing, which is
// success) and checks that it is gone for Get.
func deleteVolume(t *testing.T, b backends.Backend, id string) {
	t.Helper()
	ctx := ctxT(t)
	for range 2 {
		if err := b.Delete(ctx, id); err != nil {
			t.Fatalf("Delete %s: %v", id, err)
		}
	}
	if _, err := b.Get(ctx, id); !backends.IsNotFound(err) {
		t.Fatalf("Get of the deleted %s: %v, want ErrNotFound", id, err)
	}
}

// deleteSnapshot deletes a snapshot twice and checks that it is gone for
// GetSnapshot.
func deleteSnapshot(t *testing.T, sn backends.Snapshotter, id, src string) {
	t.Helper()
	ctx := ctxT(t)
	for range 2 {
		if err := sn.DeleteSnapshot(ctx, id, src); err != nil {
			t.Fatalf("DeleteSnapshot %s: %v", id, err)
		}
	}
	if _, err := sn.GetSnapshot(ctx, id, src); !backends.IsNotFound(err) {
		t.Fatalf("GetSnapshot of the deleted %s: %v, want ErrNotFound", id, err)
	}
}

// gone fails unless nothing is left on the store.
func gone(t *testing.T, s *snapStore, what string) {
	t.Helper()
	if got := s.raw(t); len(got) != 0 {
		t.Fatalf("%s: left on the store: %v", what, got)
	}
}
