//go:build kernel

package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// snapSize is the size of every snapshot's source: four of LVM's 4 MiB
// extents, and enough of ZFS's blocks that a restore from the wrong
// origin cannot match by chance.
const snapSize = 16 * mib

// snapshotStores are the stores that take snapshots: LVM with a thin pool
// and sparse ZFS.
var snapshotStores = []struct {
	name string
	mk   func(testing.TB) labStore
}{
	{"lvm-thin", func(t testing.TB) labStore { return newLVM(t, true) }},
	{"zfs-sparse", newZFS},
}

// snapAgent makes the calls of the snapshot tests for one store through
// an agent's gRPC client.
type snapAgent struct {
	t *testing.T
	c agentv1.AgentServiceClient
	s labStore
}

func (a snapAgent) create(id string, tk *agentv1.FencingToken, size int64, cs *agentv1.ContentSource) (*agentv1.Volume, error) {
	r, err := a.c.CreateVolume(ctxT(a.t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: a.s.store,
		CapacityBytes: size, ContentSource: cs})
	return r.GetVolume(), err
}

// mustCreate creates volume id and checks that it has the size asked for
// and a device.
func (a snapAgent) mustCreate(id string, tk *agentv1.FencingToken, size int64, cs *agentv1.ContentSource) *agentv1.Volume {
	a.t.Helper()
	v, err := a.create(id, tk, size, cs)
	if err != nil {
		a.t.Fatalf("CreateVolume %s from %v: %v", id, cs, err)
	}
	if v.GetCapacityBytes() != size || v.GetDevicePath() == "" {
		a.t.Fatalf("CreateVolume %s = %v, want %d bytes and a device", id, v, size)
	}
	return v
}

func (a snapAgent) snapshot(id, src string, own, source *agentv1.FencingToken) (*agentv1.Snapshot, error) {
	r, err := a.c.CreateSnapshot(ctxT(a.t), &agentv1.CreateSnapshotRequest{FencingToken: own, SourceFencingToken: source,
		SnapshotId: id, SourceVolumeId: src, Store: a.s.store})
	return r.GetSnapshot(), err
}

func (a snapAgent) deleteSnapshot(id, src string, own *agentv1.FencingToken) error {
	_, err := a.c.DeleteSnapshot(ctxT(a.t), &agentv1.DeleteSnapshotRequest{FencingToken: own, SnapshotId: id, SourceVolumeId: src, Store: a.s.store})
	return err
}

func (a snapAgent) deleteVolume(id string, tk *agentv1.FencingToken) error {
	_, err := a.c.DeleteVolume(ctxT(a.t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: id, Store: a.s.store})
	return err
}

// mustDeleteVolume deletes volume id twice (the retry finds nothing, which
// is success) and checks that ListVolumes no longer has it.
func (a snapAgent) mustDeleteVolume(id string, tk *agentv1.FencingToken) {
	a.t.Helper()
	for range 2 {
		if err := a.deleteVolume(id, tk); err != nil {
			a.t.Fatalf("DeleteVolume %s: %v", id, err)
		}
	}
	if slices.Contains(a.volumes(), id) {
		a.t.Fatalf("ListVolumes after DeleteVolume %s: %q", id, a.volumes())
	}
}

// mustDeleteSnapshot deletes snapshot id of src twice and checks that
// ListSnapshots no longer has it.
func (a snapAgent) mustDeleteSnapshot(id, src string, tk *agentv1.FencingToken) {
	a.t.Helper()
	for range 2 {
		if err := a.deleteSnapshot(id, src, tk); err != nil {
			a.t.Fatalf("DeleteSnapshot %s: %v", id, err)
		}
	}
	if slices.Contains(a.snapshots(), src+"@"+id) {
		a.t.Fatalf("ListSnapshots after DeleteSnapshot %s: %q", id, a.snapshots())
	}
}

// snapshots is ListSnapshots, as SOURCE@ID in the agent's order.
func (a snapAgent) snapshots() []string {
	a.t.Helper()
	r, err := a.c.ListSnapshots(ctxT(a.t), &agentv1.ListSnapshotsRequest{Store: a.s.store})
	if err != nil {
		a.t.Fatalf("ListSnapshots: %v", err)
	}
	ids := []string{}
	for _, s := range r.GetSnapshots() {
		ids = append(ids, s.GetSourceVolumeId()+"@"+s.GetSnapshotId())
	}
	return ids
}

// volumes is ListVolumes, the IDs sorted.
func (a snapAgent) volumes() []string {
	a.t.Helper()
	r, err := a.c.ListVolumes(ctxT(a.t), &agentv1.ListVolumesRequest{Store: a.s.store})
	if err != nil {
		a.t.Fatalf("ListVolumes: %v", err)
	}
	ids := []string{}
	for _, v := range r.GetVolumes() {
		ids = append(ids, v.GetVolumeId())
	}
	slices.Sort(ids)
	return ids
}

// state is what a refused call must not change: the store as its own
// tools list it, and as the agent reports it.
func (a snapAgent) state() string {
	a.t.Helper()
	return fmt.Sprintf("store %q, volumes %q, snapshots %q", storeObjects(a.t, a.s), a.volumes(), a.snapshots())
}

func fromSnapshot(id, src string, tk *agentv1.FencingToken) *agentv1.ContentSource {
	return &agentv1.ContentSource{Source: &agentv1.ContentSource_Snapshot{Snapshot: &agentv1.SnapshotSource{FencingToken: tk, SnapshotId: id, SourceVolumeId: src}}}
}

func fromVolume(id string, tk *agentv1.FencingToken) *agentv1.ContentSource {
	return &agentv1.ContentSource{Source: &agentv1.ContentSource_Volume{Volume: &agentv1.VolumeSource{FencingToken: tk, VolumeId: id}}}
}

// storeObjects lists, sorted, everything in the store as its own tools
// see it, not the backend: for ZFS every dataset and snapshot under the
// store's parent dataset (relative to it, hidden ones included), for LVM
// every logical volume but the thin pool, with its tags ("NAME TAG,TAG").
func storeObjects(t *testing.T, s labStore) []string {
	t.Helper()
	var out []string
	if z := s.store.GetZfs(); z != nil {
		parent := z.GetPool() + "/" + z.GetParentDataset()
		list, err := fixture.Command(context.Background(), "zfs list", "zfs", "list", "-H", "-t", "all", "-r", "-o", "name", parent)
		if err != nil {
			if strings.Contains(err.Error(), "dataset does not exist") {
				return nil
			}
			t.Fatal(err)
		}
		for _, n := range strings.Fields(list) {
			if n != parent {
				out = append(out, strings.TrimPrefix(n, parent+"/"))
			}
		}
	} else {
		vg := s.store.GetLvm()
		list, err := fixture.LVM(context.Background(), "lvs", "--noheadings", "--separator", "|", "-o", "lv_name,lv_tags", vg.GetVolumeGroup())
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.Lines(list) {
			name, tags, _ := strings.Cut(strings.TrimSpace(l), "|")
			if name != "" && name != vg.GetThinPool() {
				out = append(out, lvmObject(name, strings.Split(tags, ",")...))
			}
		}
	}
	slices.Sort(out)
	return out
}

// lvmObject is one line of storeObjects for LVM.
func lvmObject(name string, tags ...string) string {
	tags = slices.DeleteFunc(slices.Clone(tags), func(t string) bool { return t == "" })
	slices.Sort(tags)
	return name + " " + strings.Join(tags, ",")
}

// objectName is the name storeObjects starts the line of a volume, or of
// a snapshot (SOURCE@ID), with.
func objectName(s labStore, obj string) string {
	vg := s.store.GetLvm().GetVolumeGroup()
	if vg == "" {
		return obj
	}
	if _, id, ok := strings.Cut(obj, "@"); ok {
		obj = id
	}
	return lvm.LVName(vg, obj)
}

// hasObject reports whether storeObjects listed the volume or snapshot obj.
func hasObject(s labStore, objs []string, obj string) bool {
	name := objectName(s, obj)
	return slices.ContainsFunc(objs, func(o string) bool { return o == name || strings.HasPrefix(o, name+" ") })
}

// pillarObjects is what storeObjects lists when the store holds the
// volumes vols and the snapshots snaps (SOURCE@ID), made by pillar-csi
// without clones, and nothing else.
func pillarObjects(s labStore, vols, snaps []string) []string {
	vg := s.store.GetLvm().GetVolumeGroup()
	var out []string
	for _, v := range vols {
		if vg == "" {
			out = append(out, v)
		} else {
			out = append(out, lvmObject(objectName(s, v), lvm.TagPrefix+v))
		}
	}
	for _, sn := range snaps {
		src, id, _ := strings.Cut(sn, "@")
		if vg == "" {
			out = append(out, sn)
		} else {
			out = append(out, lvmObject(objectName(s, sn), lvm.SnapshotTagPrefix+id, lvm.SourceTagPrefix+src))
		}
	}
	slices.Sort(out)
	return out
}

func sameSnapshot(a, b *agentv1.Snapshot) bool {
	return a.GetSnapshotId() == b.GetSnapshotId() && a.GetSourceVolumeId() == b.GetSourceVolumeId() &&
		a.GetSizeBytes() == b.GetSizeBytes() && a.GetCreationTimeUnix() == b.GetCreationTimeUnix()
}

func sameVolume(a, b *agentv1.Volume) bool {
	return a.GetVolumeId() == b.GetVolumeId() && a.GetCapacityBytes() == b.GetCapacityBytes() && a.GetDevicePath() == b.GetDevicePath()
}

// deviceContent is the whole block device dev, read on the storage node
// past its page cache.
func deviceContent(t *testing.T, dev string) []byte {
	t.Helper()
	n, err := fixture.DeviceSize(dev)
	if err != nil {
		t.Fatal(err)
	}
	return fixture.ReadAt(t, dev, 0, int(n))
}

// sameContent fails unless got and want have the same SHA-256.
func sameContent(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if g, w := sha256.Sum256(got), sha256.Sum256(want); g != w {
		t.Errorf("%s: %d bytes with sha256 %x; want %d bytes with sha256 %x", what, len(got), g, len(want), w)
	}
}

// wantRefused fails unless err is a fencing refusal for reason, about
// the lifecycle key (a volume ID, or "snapshot/" and a snapshot ID).
func wantRefused(t *testing.T, what string, err error, reason agentv1.FencingRejection_Reason, key string) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("%s: %v, want FAILED_PRECONDITION", what, err)
		return
	}
	rej, ok := agentv1.FencingRejectionOf(err)
	if !ok {
		t.Errorf("%s: %v carries no FencingRejection", what, err)
		return
	}
	if rej.GetReason() != reason || rej.GetVolumeId() != key {
		t.Errorf("%s: refused with %v for %q; want %v for %q", what, rej.GetReason(), rej.GetVolumeId(), reason, key)
	}
}

// TestSnapshotRestoreAndClone: through the agent, a restore reads exactly
// the bytes its source had when the snapshot was taken, over the whole
// device, though the source was overwritten since; a clone reads what its
// source has at the moment of the call; a restore larger than its
// snapshot reports, and has, the larger size, its growth reading zeroes;
// one smaller is OUT_OF_RANGE and makes nothing; and a restore exported
// over NVMe/TCP serves the snapshot's bytes to the kernel's initiator.
func TestSnapshotRestoreAndClone(t *testing.T) {
	guest.RequireGuest(t)
	for _, c := range snapshotStores {
		t.Run(c.name, func(t *testing.T) {
			s := c.mk(t)
			requireEmptyNvmet(t)
			a := snapAgent{t, startAgent(t, t.TempDir()).c, s}
			const src, snap = "pvc-src", "snap-1"
			srcTk, snapTk := tok(fixture.RandomUUID(t), 1), tok(fixture.RandomUUID(t), 1)
			srcDev := a.mustCreate(src, srcTk, snapSize, nil).GetDevicePath()
			first := fixture.RandomBytes(t, int(snapSize))
			fixture.WriteAt(t, srcDev, 0, first)

			sn, err := a.snapshot(snap, src, snapTk, srcTk)
			if err != nil {
				t.Fatalf("CreateSnapshot: %v", err)
			}
			if taken := time.Unix(sn.GetCreationTimeUnix(), 0); sn.GetSnapshotId() != snap || sn.GetSourceVolumeId() != src ||
				sn.GetSizeBytes() != snapSize || time.Since(taken) > opTimeout || time.Until(taken) > time.Minute {
				t.Fatalf("CreateSnapshot = %v; want %s of %s, %d bytes, taken now", sn, snap, src, snapSize)
			}
			again, err := a.snapshot(snap, src, snapTk, srcTk)
			if err != nil || !sameSnapshot(again, sn) {
				t.Fatalf("retried CreateSnapshot = %v, %v; want %v", again, err, sn)
			}
			if got := a.snapshots(); !slices.Equal(got, []string{src + "@" + snap}) {
				t.Fatalf("ListSnapshots = %q", got)
			}
			// Part of the source overwritten after the snapshot.
			part := fixture.RandomBytes(t, int(mib))
			fixture.WriteAt(t, srcDev, 5*mib, part)
			second := bytes.Clone(first)
			copy(second[5*mib:], part)

			before := a.state()
			_, err = a.create("pvc-small", tok(fixture.RandomUUID(t), 1), snapSize/2, fromSnapshot(snap, src, snapTk))
			if status.Code(err) != codes.OutOfRange {
				t.Errorf("a restore smaller than its snapshot: %v, want OUT_OF_RANGE", err)
			}
			if after := a.state(); after != before {
				t.Errorf("the refused restore changed the node:\nbefore %s\nafter  %s", before, after)
			}

			const restore, clone, big = "pvc-restore", "pvc-clone", "pvc-restore-big"
			restoreTk := tok(fixture.RandomUUID(t), 1)
			r := a.mustCreate(restore, restoreTk, snapSize, fromSnapshot(snap, src, snapTk))
			sameContent(t, "the restore", deviceContent(t, r.GetDevicePath()), first)
			cl := a.mustCreate(clone, tok(fixture.RandomUUID(t), 1), snapSize, fromVolume(src, srcTk))
			sameContent(t, "the clone", deviceContent(t, cl.GetDevicePath()), second)

			bigTk := tok(fixture.RandomUUID(t), 1)
			b := a.mustCreate(big, bigTk, 2*snapSize, fromSnapshot(snap, src, snapTk))
			got := deviceContent(t, b.GetDevicePath())
			if int64(len(got)) != 2*snapSize {
				t.Fatalf("the larger restore's device has %d bytes, want %d", len(got), 2*snapSize)
			}
			sameContent(t, "the larger restore's first part", got[:snapSize], first)
			sameContent(t, "the larger restore's growth", got[snapSize:], make([]byte, snapSize))
			if again := a.mustCreate(big, bigTk, 2*snapSize, fromSnapshot(snap, src, snapTk)); !sameVolume(again, b) {
				t.Errorf("retried restore = %v, want %v", again, b)
			}
			l, err := a.c.ListVolumes(ctxT(t), &agentv1.ListVolumesRequest{Store: s.store})
			if err != nil {
				t.Fatal(err)
			}
			sizes := map[string]int64{}
			for _, v := range l.GetVolumes() {
				sizes[v.GetVolumeId()] = v.GetCapacityBytes()
			}
			if want := map[string]int64{src: snapSize, restore: snapSize, clone: snapSize, big: 2 * snapSize}; fmt.Sprint(sizes) != fmt.Sprint(want) {
				t.Errorf("ListVolumes sizes %v, want %v", sizes, want)
			}
			sameContent(t, "the source", deviceContent(t, srcDev), second)

			// The restore is a volume like any other: exported, the
			// kernel's initiator reads the snapshot's bytes.
			port := fixture.FreeTCPPort(t)
			ident, _ := export.For(restore)
			if _, err := a.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: restoreTk, VolumeId: restore, Store: s.store,
				Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(port, false)}}); err != nil {
				t.Fatalf("ExportVolume of the restore: %v", err)
			}
			ctrl := fixture.MustConnect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: hostA})
			sameContent(t, "the restore through NVMe/TCP", deviceContent(t, fixture.NamespaceByUUID(t, ident.UUID)), first)
			ctrl.Disconnect(t)
			if _, err := a.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: restoreTk, VolumeId: restore}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSnapshotFencing: every snapshot call refuses a stale or foreign
// token with its FencingRejection and changes nothing on the node, as the
// store's own tools and the agent's lists show; once a snapshot is
// deleted its token neither restores it (though ZFS keeps its data for the
// restore made before) nor takes it again.
func TestSnapshotFencing(t *testing.T) {
	guest.RequireGuest(t)
	for _, c := range snapshotStores {
		t.Run(c.name, func(t *testing.T) {
			s := c.mk(t)
			a := snapAgent{t, startAgent(t, t.TempDir()).c, s}
			const src, snap, restore = "pvc-src", "snap-1", "pvc-restore"
			snapKey := "snapshot/" + snap
			srcUID := fixture.RandomUUID(t)
			snapTk, restoreTk := tok(fixture.RandomUUID(t), 1), tok(fixture.RandomUUID(t), 1)
			a.mustCreate(src, tok(srcUID, 1), snapSize, nil)
			// The snapshot moves the source's mark to generation 2.
			if _, err := a.snapshot(snap, src, snapTk, tok(srcUID, 2)); err != nil {
				t.Fatal(err)
			}
			a.mustCreate(restore, restoreTk, snapSize, fromSnapshot(snap, src, snapTk))

			before := a.state()
			newTk := func() *agentv1.FencingToken { return tok(fixture.RandomUUID(t), 1) }
			for _, c := range []struct {
				name   string
				call   func() error
				reason agentv1.FencingRejection_Reason
				key    string
			}{
				{"CreateSnapshot with a stale source generation", func() error {
					_, err := a.snapshot("snap-2", src, newTk(), tok(srcUID, 1))
					return err
				}, agentv1.FencingRejection_REASON_STALE_GENERATION, src},
				{"CreateSnapshot with another lifecycle's source token", func() error {
					_, err := a.snapshot("snap-2", src, newTk(), restoreTk)
					return err
				}, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED, src},
				{"CreateSnapshot of the snapshot ID by another lifecycle", func() error {
					_, err := a.snapshot(snap, src, newTk(), tok(srcUID, 2))
					return err
				}, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED, snapKey},
				{"DeleteSnapshot with the source's token", func() error {
					return a.deleteSnapshot(snap, src, tok(srcUID, 2))
				}, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED, snapKey},
				{"DeleteSnapshot with its restore's token", func() error {
					return a.deleteSnapshot(snap, src, restoreTk)
				}, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED, snapKey},
				{"DeleteSnapshot without a token", func() error {
					return a.deleteSnapshot(snap, src, nil)
				}, agentv1.FencingRejection_REASON_MISSING_TOKEN, snapKey},
				{"clone with a stale source generation", func() error {
					_, err := a.create("pvc-clone", newTk(), snapSize, fromVolume(src, tok(srcUID, 1)))
					return err
				}, agentv1.FencingRejection_REASON_STALE_GENERATION, src},
				{"restore with the source's token as the snapshot's", func() error {
					_, err := a.create("pvc-restore-2", newTk(), snapSize, fromSnapshot(snap, src, tok(srcUID, 2)))
					return err
				}, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED, snapKey},
				{"DeleteVolume of the restore with its snapshot's token", func() error {
					return a.deleteVolume(restore, snapTk)
				}, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED, restore},
				{"DeleteVolume of the source with its snapshot's token", func() error {
					return a.deleteVolume(src, snapTk)
				}, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED, src},
			} {
				wantRefused(t, c.name, c.call(), c.reason, c.key)
			}
			if after := a.state(); after != before {
				t.Errorf("refused calls changed the node:\nbefore %s\nafter  %s", before, after)
			}

			a.mustDeleteSnapshot(snap, src, snapTk)
			before = a.state()
			t.Logf("after the snapshot's deletion: %s", before)
			_, err := a.create("pvc-late", newTk(), snapSize, fromSnapshot(snap, src, snapTk))
			wantRefused(t, "restore with a deleted snapshot's token", err, agentv1.FencingRejection_REASON_LIFECYCLE_ENDED, snapKey)
			_, err = a.snapshot(snap, src, snapTk, tok(srcUID, 2))
			wantRefused(t, "CreateSnapshot with a deleted snapshot's token", err, agentv1.FencingRejection_REASON_LIFECYCLE_ENDED, snapKey)
			if after := a.state(); after != before {
				t.Errorf("refused calls after the snapshot's deletion changed the node:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestSnapshotDeleteAnyOrder: through the agent, a source volume with a
// clone and a snapshot is deleted first; the snapshot still restores its
// bytes; then the snapshot, the restore and the clone are deleted, each
// gone from the agent's lists at once, and nothing is left on the store,
// hidden or not.
func TestSnapshotDeleteAnyOrder(t *testing.T) {
	guest.RequireGuest(t)
	for _, c := range snapshotStores {
		t.Run(c.name, func(t *testing.T) {
			s := c.mk(t)
			a := snapAgent{t, startAgent(t, t.TempDir()).c, s}
			const src, snap, restore, clone = "pvc-src", "snap-1", "pvc-restore", "pvc-clone"
			srcTk, snapTk := tok(fixture.RandomUUID(t), 1), tok(fixture.RandomUUID(t), 1)
			restoreTk, cloneTk := tok(fixture.RandomUUID(t), 1), tok(fixture.RandomUUID(t), 1)
			srcDev := a.mustCreate(src, srcTk, snapSize, nil).GetDevicePath()
			data := fixture.RandomBytes(t, int(snapSize))
			fixture.WriteAt(t, srcDev, 0, data)
			cl := a.mustCreate(clone, cloneTk, snapSize, fromVolume(src, srcTk))
			if _, err := a.snapshot(snap, src, snapTk, srcTk); err != nil {
				t.Fatal(err)
			}
			fixture.WriteAt(t, srcDev, 0, fixture.RandomBytes(t, int(snapSize)))

			a.mustDeleteVolume(src, srcTk)
			if got := a.snapshots(); !slices.Equal(got, []string{src + "@" + snap}) {
				t.Fatalf("ListSnapshots after the source's deletion = %q", got)
			}
			r := a.mustCreate(restore, restoreTk, snapSize, fromSnapshot(snap, src, snapTk))
			sameContent(t, "a restore of a deleted volume's snapshot", deviceContent(t, r.GetDevicePath()), data)

			a.mustDeleteSnapshot(snap, src, snapTk)
			if got := a.snapshots(); len(got) != 0 {
				t.Fatalf("ListSnapshots after the snapshot's deletion = %q", got)
			}
			t.Logf("on the store once source and snapshot are deleted: %q", storeObjects(t, s))
			sameContent(t, "the restore after its snapshot's deletion", deviceContent(t, r.GetDevicePath()), data)
			sameContent(t, "the clone after its source's deletion", deviceContent(t, cl.GetDevicePath()), data)
			a.mustDeleteVolume(restore, restoreTk)
			a.mustDeleteVolume(clone, cloneTk)
			if got := a.volumes(); len(got) != 0 {
				t.Errorf("ListVolumes after every deletion = %q", got)
			}
			if got := storeObjects(t, s); len(got) != 0 {
				t.Errorf("left on the store after every deletion: %q", got)
			}
		})
	}
}

// landing is where in a backend command killDuring kills the agent.
type landing int

const (
	// beforeCommand stops the command as soon as it has been executed and
	// kills the agent: the command dies with it (its parent-death
	// signal) before it acts.
	beforeCommand landing = iota
	// afterCommand stops the agent while its command runs to its end:
	// the agent is killed having made the change and never answered.
	afterCommand
)

func (l landing) String() string { return [...]string{"before", "after"}[l] }

// killDuring makes call on the child agent ch and SIGKILLs ch where l
// says in the first backend command it runs whose command line starts
// with args.
func killDuring(t *testing.T, ch *child, l landing, call func(agentv1.AgentServiceClient) error, args ...string) {
	t.Helper()
	what := strings.Join(args, " ")
	done := make(chan error, 1)
	go func() { done <- call(ch.c) }()
	// Looked for without a pause but a short one: the command must be
	// caught within a few milliseconds of its exec.
	var pid int
	deadline := time.Now().Add(2 * time.Minute)
	for pid = childCommand(ch.cmd.Process.Pid, args...); pid == 0; pid = childCommand(ch.cmd.Process.Pid, args...) {
		select {
		case err := <-done:
			t.Fatalf("the call returned before the agent ran %s: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not run %s", what)
		}
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop %s (%d): %v", what, pid, err)
	}
	if l == afterCommand {
		ch.stop(t)
		syscall.Kill(pid, syscall.SIGCONT)
		// A zombie, as the stopped agent cannot reap it.
		if err := waitGone(pid, 2*time.Minute); err != nil {
			t.Fatalf("%s did not end: %v", what, err)
		}
	}
	ch.kill(t)
	if err := waitGone(pid, 10*time.Second); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("10 s after the agent was SIGKILLed: %v", err)
	}
	t.Logf("killed %s the agent's %s; the call returned %v", l, what, status.Code(<-done))
}

// landed logs what the store holds after a kill, and fails unless a
// command that ran to its end (afterCommand) made obj. Before the command,
// obj is expected to be missing, but the stop may in theory come too late
// (a zfs ioctl runs to its end), so that is only reported.
func landed(t *testing.T, s labStore, l landing, obj string) {
	t.Helper()
	objs := storeObjects(t, s)
	made := hasObject(s, objs, obj)
	t.Logf("on the store after the kill %s the command (%s made: %v): %q", l, obj, made, objs)
	if l == afterCommand && !made {
		t.Fatalf("the command ran to its end, and %s is not on the store", obj)
	}
}

// TestSnapshotKill SIGKILLs the agent process in the middle of
// CreateSnapshot and of a restore, in the backend command that makes the
// snapshot or the volume: once before that command acts, once after it
// has made its change and before the agent read its result. A new agent
// on the same marks accepts the identical retry, which converges: the
// snapshot has its source's bytes at the time, the restore the snapshot's
// and the size asked for, and the store holds exactly what pillar-csi
// made (no half-made LV with its origin's tags, no stray dataset);
// deleted through the agent, nothing is left.
func TestSnapshotKill(t *testing.T) {
	guest.RequireGuest(t)
	for _, c := range snapshotStores {
		t.Run(c.name, func(t *testing.T) {
			s := c.mk(t)
			snapCmd, restoreCmd := []string{"lvm", "lvcreate"}, []string{"lvm", "lvcreate"}
			if s.store.GetZfs() != nil {
				snapCmd, restoreCmd = []string{"zfs", "snapshot"}, []string{"zfs", "clone"}
			}
			gen := t.TempDir()
			ch := startChild(t, gen)
			a := snapAgent{t, ch.c, s}
			const src = "pvc-src"
			srcTk := tok(fixture.RandomUUID(t), 1)
			srcDev := a.mustCreate(src, srcTk, snapSize, nil).GetDevicePath()

			type snapRound struct {
				landing   landing
				id        string
				tk        *agentv1.FencingToken
				data      []byte
				restore   string
				restoreTk *agentv1.FencingToken
			}
			var rounds []*snapRound
			for _, l := range []landing{beforeCommand, afterCommand} {
				rounds = append(rounds, &snapRound{landing: l, id: "snap-" + l.String(), tk: tok(fixture.RandomUUID(t), 1),
					restore: "pvc-restore-" + l.String(), restoreTk: tok(fixture.RandomUUID(t), 1)})
			}
			var vols, snaps []string
			vols = append(vols, src)
			for _, r := range rounds {
				r.data = fixture.RandomBytes(t, int(snapSize))
				fixture.WriteAt(t, srcDev, 0, r.data)
				killDuring(t, ch, r.landing, func(c agentv1.AgentServiceClient) error {
					_, err := snapAgent{t, c, s}.snapshot(r.id, src, r.tk, srcTk)
					return err
				}, snapCmd...)
				landed(t, s, r.landing, src+"@"+r.id)
				ch = startChild(t, gen)
				a = snapAgent{t, ch.c, s}
				// What the killed call made is no volume, and no
				// snapshot until the retry finishes it.
				if got := a.volumes(); !slices.Equal(got, vols) {
					t.Errorf("ListVolumes after the kill = %q, want %q", got, vols)
				}
				got := a.snapshots()
				if others := slices.DeleteFunc(slices.Clone(got), func(x string) bool { return x == src+"@"+r.id }); !slices.Equal(others, snaps) {
					t.Errorf("ListSnapshots after the kill = %q, want %q and perhaps %s", got, snaps, r.id)
				}
				sn, err := a.snapshot(r.id, src, r.tk, srcTk)
				if err != nil {
					t.Fatalf("CreateSnapshot retried after the kill: %v", err)
				}
				if sn.GetSnapshotId() != r.id || sn.GetSourceVolumeId() != src || sn.GetSizeBytes() != snapSize {
					t.Errorf("CreateSnapshot retried after the kill = %v", sn)
				}
				snaps = append(snaps, src+"@"+r.id)
				slices.Sort(snaps) // the agent's order: one source, by snapshot ID
				if got := storeObjects(t, s); !slices.Equal(got, pillarObjects(s, vols, snaps)) {
					t.Errorf("on the store after the retry: %q; want %q", got, pillarObjects(s, vols, snaps))
				}
			}
			fixture.WriteAt(t, srcDev, 0, fixture.RandomBytes(t, int(snapSize)))

			for _, r := range rounds {
				// Larger than the snapshot: the retry also finishes
				// the growth that follows the clone.
				restore := func(c agentv1.AgentServiceClient) (*agentv1.Volume, error) {
					return snapAgent{t, c, s}.create(r.restore, r.restoreTk, 2*snapSize, fromSnapshot(r.id, src, r.tk))
				}
				killDuring(t, ch, r.landing, func(c agentv1.AgentServiceClient) error {
					_, err := restore(c)
					return err
				}, restoreCmd...)
				landed(t, s, r.landing, r.restore)
				ch = startChild(t, gen)
				a = snapAgent{t, ch.c, s}
				if got := a.snapshots(); !slices.Equal(got, snaps) {
					t.Errorf("ListSnapshots after the kill = %q, want %q", got, snaps)
				}
				v, err := restore(ch.c)
				if err != nil {
					t.Fatalf("restore retried after the kill: %v", err)
				}
				if v.GetCapacityBytes() != 2*snapSize {
					t.Errorf("restore retried after the kill = %v, want %d bytes", v, 2*snapSize)
				}
				got := deviceContent(t, v.GetDevicePath())
				want := append(bytes.Clone(r.data), make([]byte, snapSize)...)
				sameContent(t, "the restore retried after the kill", got, want)
				vols = append(vols, r.restore)
				if got := storeObjects(t, s); !slices.Equal(got, pillarObjects(s, vols, snaps)) {
					t.Errorf("on the store after the retry: %q; want %q", got, pillarObjects(s, vols, snaps))
				}
			}

			for _, r := range rounds {
				a.mustDeleteVolume(r.restore, r.restoreTk)
				a.mustDeleteSnapshot(r.id, src, r.tk)
			}
			a.mustDeleteVolume(src, srcTk)
			if got := storeObjects(t, s); len(got) != 0 {
				t.Errorf("left on the store after every deletion: %q", got)
			}
		})
	}
}

// TestSnapshotLinearLVM: a linear LVM store refuses CreateSnapshot, and
// every other snapshot call, with FAILED_PRECONDITION whose message names
// the store's type, without a fencing refusal, and makes nothing.
func TestSnapshotLinearLVM(t *testing.T) {
	guest.RequireGuest(t)
	s := newLVM(t, false)
	a := snapAgent{t, startAgent(t, t.TempDir()).c, s}
	const src = "pvc-src"
	srcTk := tok(fixture.RandomUUID(t), 1)
	a.mustCreate(src, srcTk, snapSize, nil)
	before := storeObjects(t, s)
	snapTk := tok(fixture.RandomUUID(t), 1)
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"CreateSnapshot", func() error { _, err := a.snapshot("snap-1", src, snapTk, srcTk); return err }},
		{"clone", func() error {
			_, err := a.create("pvc-clone", tok(fixture.RandomUUID(t), 1), snapSize, fromVolume(src, srcTk))
			return err
		}},
		{"restore", func() error {
			_, err := a.create("pvc-restore", tok(fixture.RandomUUID(t), 1), snapSize, fromSnapshot("snap-1", src, snapTk))
			return err
		}},
		{"DeleteSnapshot", func() error { return a.deleteSnapshot("snap-1", src, snapTk) }},
		{"ListSnapshots", func() error {
			_, err := a.c.ListSnapshots(ctxT(t), &agentv1.ListSnapshotsRequest{Store: s.store})
			return err
		}},
	} {
		err := c.call()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "linear") {
			t.Errorf("%s on a linear store: %v; want FAILED_PRECONDITION naming the store's type (linear)", c.name, err)
		}
		if rej, ok := agentv1.FencingRejectionOf(err); ok {
			t.Errorf("%s on a linear store: refused by fencing (%v), not by the store", c.name, rej)
		}
		t.Logf("%s on a linear store: %v", c.name, err)
	}
	if after := storeObjects(t, s); !slices.Equal(after, before) {
		t.Errorf("the refused calls changed the store: %q, before %q", after, before)
	}
}
