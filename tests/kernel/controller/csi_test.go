//go:build kernel

package controller

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

const (
	// volumeSize is what every volume is created with: ext4 on it, and
	// room to grow. (mkfs.xfs would need 300 MB at least.)
	volumeSize = 512 * mib
	// expandedSize is what the lifecycle grows it to.
	expandedSize = 640 * mib
	// dataSize is what a pod writes through the mounted filesystem.
	dataSize = 16 * mib
)

// TestCSIVolumeLifecycle drives the CSI Controller service of
// pillar-controller (its -csi-endpoint socket) and two pillar-node
// processes, workers A and B with their own host NQNs, through a volume's
// life, for a ZFS store and an LVM thin store: CreateVolume with the
// generated StorageClass's parameters, ControllerPublish to A, stage and
// publish on A, write and fsync data through the filesystem, grow the
// volume (ControllerExpand + NodeExpand) and see the filesystem grow, an
// RWO ControllerPublish to B refused while A holds it, the move from A to
// B with the data read back on B, and DeleteVolume leaving no zvol or LV
// and no nvmet subsystem.
func TestCSIVolumeLifecycle(t *testing.T) {
	l := setup(t)
	s := newStack(t, l, "storage-csi", backendZFS, backendLVMThin)
	a, b := s.startWorker("worker-a"), s.startWorker("worker-b")
	for _, kind := range []string{backendZFS, backendLVMThin} {
		t.Run(kind, func(t *testing.T) {
			// The stack's helpers fail the test they were made with;
			// the subtest is that test while it runs.
			parent := s.t
			s.t = t
			defer func() { s.t = parent }()
			lifecycle(t, s, s.stores[kind], a, b)
		})
	}
}

func lifecycle(t *testing.T, s *stack, st *store, a, b *worker) {
	sw := newStopwatch(t)
	id := "pvc-" + st.kind + "-" + fixture.RandomHex(t, 4)

	capResp, err := s.ctrl.GetCapacity(csiCtx(t), &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{rwo()}, Parameters: st.params})
	if err != nil {
		t.Fatalf("GetCapacity: %v", err)
	}
	if capResp.GetAvailableCapacity() < volumeSize {
		t.Errorf("GetCapacity of %s: %d bytes available, want at least %d", st.name, capResp.GetAvailableCapacity(), volumeSize)
	}
	sw.step("GetCapacity (%d bytes available)", capResp.GetAvailableCapacity())

	v := s.createVolume(st, id, volumeSize)
	if ids := st.backendVolumes(t); len(ids) != 1 || ids[0] != id {
		t.Errorf("after CreateVolume %s the %s backend has volumes %v, want exactly [%s]", id, st.kind, ids, id)
	}
	if n := st.backendSize(t, id); n < volumeSize {
		t.Errorf("backend volume %s has %d bytes, want at least %d", id, n, volumeSize)
	}
	if attr := readAttr(filepath.Join(fixture.NVMetRoot, "subsystems", v.nqn, "attr_allow_any_host")); attr != "0" {
		t.Errorf("subsystem %s attr_allow_any_host = %s, want 0 (aclEnabled)", v.nqn, attr)
	}
	sw.step("CreateVolume %s (%d MiB, %s)", id, volumeSize/mib, st.kind)

	v.publish(a)
	if allowed(v.nqn, b.hostNQN) {
		t.Errorf("worker B's host NQN is allowed on %s, only A was published", v.nqn)
	}
	sw.step("ControllerPublishVolume to A")
	v.stage(a)
	sw.step("NodeStageVolume + NodePublishVolume on A (connect, mkfs.ext4, mount)")

	data := fixture.RandomBytes(t, int(dataSize))
	sum := sha256.Sum256(data)
	file := filepath.Join(a.target(id), "data.bin")
	fixture.WriteFile(t, file, data)
	sw.step("write and fsync %d MiB on A", dataSize/mib)

	before := fsBytes(t, a.target(id))
	er, err := s.ctrl.ControllerExpandVolume(csiCtx(t), &csi.ControllerExpandVolumeRequest{VolumeId: id,
		CapacityRange: &csi.CapacityRange{RequiredBytes: expandedSize}, VolumeCapability: rwo()})
	if err != nil {
		t.Fatalf("ControllerExpandVolume %s to %d: %v", id, expandedSize, err)
	}
	if er.GetCapacityBytes() < expandedSize || !er.GetNodeExpansionRequired() {
		t.Errorf("ControllerExpandVolume: capacity %d, node expansion required %v; want ≥ %d and true", er.GetCapacityBytes(), er.GetNodeExpansionRequired(), expandedSize)
	}
	if n := st.backendSize(t, id); n < expandedSize {
		t.Errorf("after ControllerExpandVolume the backend volume has %d bytes, want at least %d", n, expandedSize)
	}
	sw.step("ControllerExpandVolume to %d MiB", expandedSize/mib)
	if _, err := a.api.NodeExpandVolume(csiCtx(t), &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: a.target(id),
		StagingTargetPath: a.staging(id), CapacityRange: &csi.CapacityRange{RequiredBytes: expandedSize}, VolumeCapability: rwo()}); err != nil {
		t.Fatalf("NodeExpandVolume %s: %v", id, err)
	}
	after := fsBytes(t, a.target(id))
	// ext4's own metadata for the new block groups takes a little of
	// the new space.
	if grown := after - before; grown < (expandedSize-volumeSize)*9/10 {
		t.Errorf("the filesystem grew from %d to %d bytes (+%d); want about +%d", before, after, grown, expandedSize-volumeSize)
	}
	sw.step("NodeExpandVolume on A (fs %d → %d MiB)", before/mib, after/mib)

	_, err = s.ctrl.ControllerPublishVolume(csiCtx(t), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: b.nodeID,
		VolumeCapability: rwo(), VolumeContext: v.ctx})
	// The refusal names the node, never its host NQN: it reaches the
	// pod's events.
	nameA, nqnA, _ := strings.Cut(a.nodeID, "/")
	if codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "node "+nameA+" ") || strings.Contains(err.Error(), nqnA) {
		t.Errorf("ControllerPublishVolume RWO to B while A holds the volume: %v; want FailedPrecondition naming node %s and not its host NQN", err, nameA)
	} else {
		t.Logf("refused as it should be: %v", err)
	}
	if allowed(v.nqn, b.hostNQN) {
		t.Errorf("the refused publication left B's host NQN on %s", v.nqn)
	}
	sw.step("ControllerPublishVolume RWO to B refused")

	v.unstage(a)
	sw.step("NodeUnpublishVolume + NodeUnstageVolume on A")
	v.unpublish(a)
	sw.step("ControllerUnpublishVolume from A")
	v.publish(b)
	sw.step("ControllerPublishVolume to B")
	v.stage(b)
	sw.step("NodeStageVolume + NodePublishVolume on B (no mkfs)")
	got, err := os.ReadFile(filepath.Join(b.target(id), "data.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if gs := sha256.Sum256(got); !bytes.Equal(gs[:], sum[:]) {
		t.Errorf("data read on B: sha256 %x, A wrote %x", gs, sum)
	}
	if n := fsBytes(t, b.target(id)); n != after {
		t.Errorf("the filesystem on B has %d bytes, on A it had grown to %d", n, after)
	}
	sw.step("read %d MiB on B, checksum equal", dataSize/mib)

	v.unstage(b)
	v.unpublish(b)
	sw.step("unpublish, unstage, ControllerUnpublish on B")
	v.delete()
	if ids := st.backendVolumes(t); len(ids) != 0 {
		t.Errorf("after DeleteVolume the %s store still has volumes %v", st.kind, ids)
	}
	sw.step("DeleteVolume (zvol/LV, subsystem, PillarVolumeState gone)")
	sw.summary("lifecycle " + st.kind)
}
