package server

import (
	"errors"
	"slices"
	"strings"
	"testing"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
	"google.golang.org/grpc/codes"
)

const uidSnap, uidSnap2, uidClone = "7b0c3c52-4d2e-4c55-9f21-0000000000a1", "7b0c3c52-4d2e-4c55-9f21-0000000000a2", "7b0c3c52-4d2e-4c55-9f21-0000000000c1"

func (h *harness) snapshot(id, src string, own, source *agentv1.FencingToken) (*agentv1.CreateSnapshotResponse, error) {
	return h.c.CreateSnapshot(ctxT(h.t), &agentv1.CreateSnapshotRequest{FencingToken: own, SourceFencingToken: source,
		SnapshotId: id, SourceVolumeId: src, Store: lvmStore})
}

func (h *harness) deleteSnapshot(id, src string, own *agentv1.FencingToken) error {
	_, err := h.c.DeleteSnapshot(ctxT(h.t), &agentv1.DeleteSnapshotRequest{FencingToken: own, SnapshotId: id, SourceVolumeId: src, Store: lvmStore})
	return err
}

func (h *harness) createFrom(id string, own *agentv1.FencingToken, size int64, cs *agentv1.ContentSource) (*agentv1.CreateVolumeResponse, error) {
	return h.c.CreateVolume(ctxT(h.t), &agentv1.CreateVolumeRequest{FencingToken: own, VolumeId: id, Store: lvmStore, CapacityBytes: size, ContentSource: cs})
}

func fromSnapshot(id, src string, tk *agentv1.FencingToken) *agentv1.ContentSource {
	return &agentv1.ContentSource{Source: &agentv1.ContentSource_Snapshot{Snapshot: &agentv1.SnapshotSource{FencingToken: tk, SnapshotId: id, SourceVolumeId: src}}}
}

func fromVolume(id string, tk *agentv1.FencingToken) *agentv1.ContentSource {
	return &agentv1.ContentSource{Source: &agentv1.ContentSource_Volume{Volume: &agentv1.VolumeSource{FencingToken: tk, VolumeId: id}}}
}

func (h *harness) snapshotIDs() []string {
	h.t.Helper()
	r, err := h.c.ListSnapshots(ctxT(h.t), &agentv1.ListSnapshotsRequest{Store: lvmStore})
	if err != nil {
		h.t.Fatalf("ListSnapshots: %v", err)
	}
	var ids []string
	for _, s := range r.GetSnapshots() {
		ids = append(ids, s.GetSourceVolumeId()+"@"+s.GetSnapshotId())
	}
	return ids
}

func TestSnapshotLifecycle(t *testing.T) {
	h := newHarness(t)
	if _, err := h.create("pvc-a", tok(uid1, 1), 1<<20); err != nil {
		t.Fatal(err)
	}
	r, err := h.snapshot("snap-1", "pvc-a", tok(uidSnap, 1), tok(uid1, 1))
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if s := r.GetSnapshot(); s.GetSizeBytes() != 1<<20 || s.GetSourceVolumeId() != "pvc-a" || s.GetCreationTimeUnix() != 1700000000 {
		t.Errorf("CreateSnapshot = %v", s)
	}
	// A retry is answered with the same snapshot.
	if again, err := h.snapshot("snap-1", "pvc-a", tok(uidSnap, 1), tok(uid1, 1)); err != nil || again.GetSnapshot().GetSizeBytes() != 1<<20 {
		t.Errorf("retried CreateSnapshot = %v, %v", again, err)
	}
	if got := h.snapshotIDs(); !slices.Equal(got, []string{"pvc-a@snap-1"}) {
		t.Errorf("ListSnapshots = %v", got)
	}

	// Restore: at least the snapshot's size, under the snapshot's token.
	_, err = h.createFrom("pvc-small", tok(uidClone, 1), 1<<19, fromSnapshot("snap-1", "pvc-a", tok(uidSnap, 1)))
	wantCode(t, "restore smaller than the snapshot", err, codes.OutOfRange)
	if _, err := h.createFrom("pvc-r", tok(uidClone, 1), 2<<20, fromSnapshot("snap-1", "pvc-a", tok(uidSnap, 1))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := h.be.origin["pvc-r"]; got != "snapshot snap-1" {
		t.Errorf("pvc-r made from %q", got)
	}
	// Another content source for an existing volume is a clash.
	_, err = h.createFrom("pvc-r", tok(uidClone, 1), 2<<20, fromVolume("pvc-a", tok(uid1, 1)))
	wantCode(t, "pvc-r again from another source", err, codes.AlreadyExists)

	// The source can go first; the snapshot stays.
	if _, err := h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-a", Store: lvmStore}); err != nil {
		t.Fatal(err)
	}
	if got := h.snapshotIDs(); !slices.Equal(got, []string{"pvc-a@snap-1"}) {
		t.Errorf("ListSnapshots after the source's deletion = %v", got)
	}
	if err := h.deleteSnapshot("snap-1", "pvc-a", tok(uidSnap, 1)); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if err := h.deleteSnapshot("snap-1", "pvc-a", tok(uidSnap, 1)); err != nil {
		t.Errorf("retried DeleteSnapshot: %v", err)
	}
	if got := h.snapshotIDs(); len(got) != 0 {
		t.Errorf("ListSnapshots after DeleteSnapshot = %v", got)
	}
	// The snapshot's lifecycle has ended: its token restores nothing and
	// makes no new snapshot.
	before := len(h.be.mutations())
	_, err = h.createFrom("pvc-late", tok(uidClone, 1), 2<<20, fromSnapshot("snap-1", "pvc-a", tok(uidSnap, 1)))
	wantRejection(t, "restore of a deleted snapshot", err, agentv1.FencingRejection_REASON_LIFECYCLE_ENDED)
	if got := h.be.mutations()[before:]; len(got) != 0 {
		t.Errorf("a refused restore ran %v", got)
	}
}

func TestSnapshotFencing(t *testing.T) {
	h := newHarness(t)
	h.mustCreateExport("pvc-a", tok(uid1, 3), false)
	before := len(h.be.mutations())
	for _, c := range []struct {
		name         string
		own, source  *agentv1.FencingToken
		want         agentv1.FencingRejection_Reason
		wantRejected string
	}{
		{"no snapshot token", nil, tok(uid1, 3), agentv1.FencingRejection_REASON_MISSING_TOKEN, "snapshot/snap-1"},
		{"no source token", tok(uidSnap, 1), nil, agentv1.FencingRejection_REASON_MISSING_TOKEN, "pvc-a"},
		{"stale source generation", tok(uidSnap, 1), tok(uid1, 2), agentv1.FencingRejection_REASON_STALE_GENERATION, "pvc-a"},
		{"another lifecycle of the source", tok(uidSnap, 1), tok(uid2, 9), agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED, "pvc-a"},
	} {
		_, err := h.snapshot("snap-1", "pvc-a", c.own, c.source)
		if rej := wantRejection(t, c.name, err, c.want); rej != nil && rej.GetVolumeId() != c.wantRejected {
			t.Errorf("%s: rejected for %q, want %q", c.name, rej.GetVolumeId(), c.wantRejected)
		}
	}
	if got := h.be.mutations()[before:]; len(got) != 0 {
		t.Errorf("refused snapshots ran %v", got)
	}

	if _, err := h.snapshot("snap-1", "pvc-a", tok(uidSnap, 1), tok(uid1, 3)); err != nil {
		t.Fatal(err)
	}
	// Another lifecycle cannot take over the snapshot's ID or delete it.
	_, err := h.snapshot("snap-1", "pvc-a", tok(uidSnap2, 1), tok(uid1, 3))
	wantRejection(t, "snapshot ID of another lifecycle", err, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED)
	wantRejection(t, "delete with another lifecycle", h.deleteSnapshot("snap-1", "pvc-a", tok(uidSnap2, 1)), agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED)
	wantRejection(t, "delete without a token", h.deleteSnapshot("snap-1", "pvc-a", nil), agentv1.FencingRejection_REASON_MISSING_TOKEN)
	if got := h.snapshotIDs(); !slices.Equal(got, []string{"pvc-a@snap-1"}) {
		t.Errorf("after refused deletes: %v", got)
	}

	// A clone is fenced by its source's token as well as its own.
	before = len(h.be.mutations())
	_, err = h.createFrom("pvc-c", tok(uidClone, 1), 1<<20, fromVolume("pvc-a", tok(uid1, 2)))
	wantRejection(t, "clone with a stale source token", err, agentv1.FencingRejection_REASON_STALE_GENERATION)
	_, err = h.createFrom("pvc-c", tok(uidClone, 1), 1<<20, fromVolume("pvc-a", nil))
	wantRejection(t, "clone without a source token", err, agentv1.FencingRejection_REASON_MISSING_TOKEN)
	_, err = h.createFrom("pvc-c", tok(uidClone, 1), 1<<20, fromSnapshot("snap-1", "pvc-a", tok(uidSnap2, 1)))
	wantRejection(t, "restore with another snapshot lifecycle", err, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED)
	if got := h.be.mutations()[before:]; len(got) != 0 {
		t.Errorf("refused clones ran %v", got)
	}
	_, err = h.createFrom("pvc-a", tok(uid1, 3), 1<<20, fromVolume("pvc-a", tok(uid1, 3)))
	wantCode(t, "clone of itself", err, codes.InvalidArgument)
	if _, err := h.createFrom("pvc-c", tok(uidClone, 1), 1<<20, fromVolume("pvc-a", tok(uid1, 3))); err != nil {
		t.Fatalf("clone: %v", err)
	}
	if got := h.be.origin["pvc-c"]; got != "volume pvc-a" {
		t.Errorf("pvc-c made from %q", got)
	}
	// The clone has its own lifecycle: the source's token does not touch it.
	_, err = h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tok(uid1, 3), VolumeId: "pvc-c", Store: lvmStore})
	wantRejection(t, "delete of the clone with its source's token", err, agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED)
}

func TestSnapshotsUnsupported(t *testing.T) {
	h := newHarness(t)
	if _, err := h.create("pvc-a", tok(uid1, 1), 1<<20); err != nil {
		t.Fatal(err)
	}
	h.be.noSnapshots = true
	_, err := h.snapshot("snap-1", "pvc-a", tok(uidSnap, 1), tok(uid1, 1))
	wantCode(t, "snapshot of a store without snapshots", err, codes.FailedPrecondition)
	_, err = h.c.ListSnapshots(ctxT(t), &agentv1.ListSnapshotsRequest{Store: lvmStore})
	wantCode(t, "list", err, codes.FailedPrecondition)
	_, err = h.createFrom("pvc-c", tok(uidClone, 1), 1<<20, fromVolume("pvc-a", tok(uid1, 1)))
	wantCode(t, "clone", err, codes.FailedPrecondition)
	h.be.noSnapshots = false
	for _, bad := range []*agentv1.CreateSnapshotRequest{
		{FencingToken: tok(uidSnap, 1), SourceFencingToken: tok(uid1, 1), SnapshotId: "Snap_1", SourceVolumeId: "pvc-a", Store: lvmStore},
		{FencingToken: tok(uidSnap, 1), SourceFencingToken: tok(uid1, 1), SnapshotId: "snap-1", SourceVolumeId: "", Store: lvmStore},
		{FencingToken: tok(uidSnap, 1), SourceFencingToken: tok(uid1, 1), SnapshotId: "snap-1", SourceVolumeId: "pvc-a"},
		// A valid volume ID, but its fencing key would not fit.
		{FencingToken: tok(uidSnap, 1), SourceFencingToken: tok(uid1, 1), SnapshotId: strings.Repeat("s", agentv1.MaxSnapshotIDLength+1), SourceVolumeId: "pvc-a", Store: lvmStore},
	} {
		_, err := h.c.CreateSnapshot(ctxT(t), bad)
		wantCode(t, "malformed "+bad.String(), err, codes.InvalidArgument)
	}
	_, err = h.createFrom("pvc-c", tok(uidClone, 1), 1<<20, &agentv1.ContentSource{})
	wantCode(t, "empty content source", err, codes.InvalidArgument)
}

// TestSnapshotIDNamesOneThing: a snapshot ID names one snapshot in a
// store, though ZFS (as the fake) would take SOURCE@ID under every source;
// an ID that names a volume is refused as well. Nothing is made.
func TestSnapshotIDNamesOneThing(t *testing.T) {
	h := newHarness(t)
	for _, v := range []string{"pvc-a", "pvc-b"} {
		if _, err := h.create(v, tok(uid1, 1), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.snapshot("snap-1", "pvc-a", tok(uidSnap, 1), tok(uid1, 1)); err != nil {
		t.Fatal(err)
	}
	before := len(h.be.mutations())
	_, err := h.snapshot("snap-1", "pvc-b", tok(uidSnap, 1), tok(uid1, 1))
	wantCode(t, "the ID of pvc-a's snapshot for pvc-b", err, codes.AlreadyExists)
	_, err = h.snapshot("pvc-b", "pvc-a", tok(uidSnap2, 1), tok(uid1, 1))
	wantCode(t, "a volume's ID as a snapshot ID", err, codes.AlreadyExists)
	if got := h.be.mutations()[before:]; len(got) != 0 {
		t.Errorf("refused snapshots ran %v", got)
	}
	if got := h.snapshotIDs(); !slices.Equal(got, []string{"pvc-a@snap-1"}) {
		t.Errorf("ListSnapshots = %v", got)
	}
}

// TestSnapshotRefusalsLeaveNoMark: a store without snapshots is refused
// before fencing, so a restore there leaves no mark for the volume it
// never made; and a fencing store's failure reaches the caller without the
// mark file's path.
func TestSnapshotRefusalsLeaveNoMark(t *testing.T) {
	h := newHarness(t)
	if _, err := h.create("pvc-a", tok(uid1, 1), 1<<20); err != nil {
		t.Fatal(err)
	}
	h.be.noSnapshots = true
	_, err := h.createFrom("pvc-r", tok(uidClone, 1), 1<<20, fromSnapshot("snap-1", "pvc-a", tok(uidSnap, 1)))
	wantCode(t, "restore on a store without snapshots", err, codes.FailedPrecondition)
	for _, key := range []string{"pvc-r", "snapshot/snap-1"} {
		if m, err := h.srv.marks.Get(ctxT(t), key); err != nil || m != nil {
			t.Errorf("mark of %s after the refusal: %+v, %v", key, m, err)
		}
	}
	h.be.noSnapshots = false

	// The existence check of an unmarked snapshot fails: a fencing
	// store's failure, whose path stays on the node.
	h.be.getSnapshotErr = errors.New("zfs list: I/O error")
	err = h.deleteSnapshot("snap-x", "pvc-a", tok(uidSnap, 1))
	if err == nil || strings.Contains(err.Error(), h.gen) || !strings.Contains(err.Error(), "I/O error") {
		t.Errorf("DeleteSnapshot with a failing check: %v; want the cause without the marks directory %s", err, h.gen)
	}
}

// TestDeleteSnapshotOfANameTakenElsewhere: when the snapshot's name is
// held by something it does not own, there is nothing of it to delete:
// the lifecycle ends and the call succeeds, instead of ALREADY_EXISTS
// forever (a record and its store stuck).
func TestDeleteSnapshotOfANameTakenElsewhere(t *testing.T) {
	h := newHarness(t)
	if _, err := h.create("pvc-a", tok(uid1, 1), 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := h.snapshot("snap-1", "pvc-a", tok(uidSnap, 1), tok(uid1, 1)); err != nil {
		t.Fatal(err)
	}
	h.be.failNext = backends.ErrConflict
	if err := h.deleteSnapshot("snap-1", "pvc-a", tok(uidSnap, 1)); err != nil {
		t.Fatalf("DeleteSnapshot of a name held elsewhere: %v", err)
	}
	_, err := h.createFrom("pvc-r", tok(uidClone, 1), 1<<20, fromSnapshot("snap-1", "pvc-a", tok(uidSnap, 1)))
	wantRejection(t, "restore after the delete", err, agentv1.FencingRejection_REASON_LIFECYCLE_ENDED)
}
