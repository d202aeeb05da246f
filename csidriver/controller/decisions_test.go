package controller

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
)

// The rules of decisions.go, proven without an API server or an agent;
// the tests in the controller_test package prove that the handlers apply
// them to real records.

const (
	volID = "pvc-0f1e2d3c-aaaa-bbbb-cccc-000011112222"
	nqnA  = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001"
	nqnB  = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002"
	nqnC  = "nqn.2014-08.org.nvmexpress:uuid:cccccccc-0000-4000-8000-000000000003"
)

const (
	rwo  = v1alpha1.AccessReadWriteOnce
	rwop = v1alpha1.AccessReadWriteOncePod
	rox  = v1alpha1.AccessReadOnlyMany
	rwx  = v1alpha1.AccessReadWriteMany
)

// pub is a publication to node (worker-a…) presenting nqn.
func pub(node, nqn string, mode v1alpha1.AccessMode, ro bool) v1alpha1.Publication {
	return v1alpha1.Publication{NodeID: node + "/" + nqn, HostNQN: v1alpha1.NQN(nqn), AccessMode: mode, ReadOnly: ro}
}

func pubs(p ...v1alpha1.Publication) []v1alpha1.Publication { return p }

// wantStatus fails unless err has code (OK: no error) and its message
// says each of says.
func wantStatus(t *testing.T, what string, err error, code codes.Code, says ...string) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Errorf("%s: %v, want %s", what, err, code)
		return
	}
	for _, s := range says {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Errorf("%s: %q does not say %q", what, status.Convert(err).Message(), s)
		}
	}
}

func capOf(mode csi.VolumeCapability_AccessMode_Mode, fs string) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if fs == "block" {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}}
	}
	return c
}

func TestVolumeIDFor(t *testing.T) {
	if got := volumeIDFor(volID); got != volID {
		t.Errorf("a valid name is the ID: %q", got)
	}
	a, b := volumeIDFor("Sanity Volume/1"), volumeIDFor("Sanity Volume/1")
	if a != b || !strings.HasPrefix(a, "vol-") || len(a) != 44 || a == volumeIDFor("Sanity Volume/2") {
		t.Errorf("derived IDs %q, %q", a, b)
	}
}

func TestCapacityFor(t *testing.T) {
	for _, c := range []struct {
		req, lim, want int64
		ok             bool
	}{
		{0, 0, DefaultCapacity, true},
		{5, 0, 5, true},
		{0, 100, 100, true},
		{0, 4 << 30, DefaultCapacity, true},
		{10, 5, 0, false},
		{-1, 0, 0, false},
	} {
		got, err := capacityFor(&csi.CapacityRange{RequiredBytes: c.req, LimitBytes: c.lim})
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("capacityFor(%d, %d) = %d, %v", c.req, c.lim, got, err)
		}
	}
}

func TestAccessModeOf(t *testing.T) {
	for _, c := range []struct {
		name string
		c    *csi.VolumeCapability
		want v1alpha1.AccessMode
		says string // the refusal, when want is ""
	}{
		{"single-node writer", capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, ""), rwo, ""},
		// SINGLE_NODE_MULTI_WRITER is one node's pods sharing: the same
		// exclusivity towards other nodes as ReadWriteOnce.
		{"single-node multi-writer", capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, ""), rwo, ""},
		{"single-node single-writer", capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, ""), rwop, ""},
		{"multi-node reader", capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, ""), rox, ""},
		{"single-node reader", capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, ""), rox, ""},
		{"multi-node single writer", capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, ""), "", "access mode MULTI_NODE_SINGLE_WRITER is not supported"},
		{"multi-node multi-writer", capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "block"), rwx, ""},
		{"multi-node single writer", capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, ""), "", "access mode MULTI_NODE_SINGLE_WRITER is not supported"},
		{"unknown mode", capOf(csi.VolumeCapability_AccessMode_UNKNOWN, ""), "", "access mode UNKNOWN is not supported"},
		{"a mode number from a newer spec", capOf(99, ""), "", "access mode 99 is not supported"},
		{"no access mode", &csi.VolumeCapability{}, "", "access mode UNKNOWN is not supported"},
		{"no capability", nil, "", "access mode UNKNOWN is not supported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := accessModeOf(c.c)
			if got != c.want || (err == nil) != (c.says == "") || err != nil && !strings.Contains(err.Error(), c.says) {
				t.Errorf("accessModeOf = %q, %v; want %q, %q", got, err, c.want, c.says)
			}
		})
	}
}

func TestCheckCapabilities(t *testing.T) {
	rw := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	for _, c := range []struct {
		name string
		caps []*csi.VolumeCapability
		says string // "" is accepted
	}{
		{"none", nil, "volume capabilities are required"},
		{"block", []*csi.VolumeCapability{capOf(rw, "block")}, ""},
		{"mount, default filesystem", []*csi.VolumeCapability{capOf(rw, "")}, ""},
		{"ext4", []*csi.VolumeCapability{capOf(rw, "ext4")}, ""},
		{"xfs readers", []*csi.VolumeCapability{capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "xfs")}, ""},
		{"btrfs", []*csi.VolumeCapability{capOf(rw, "btrfs")}, `filesystem "btrfs" is not supported: use ext4 or xfs`},
		{"no access type", []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: rw}}}, "access type (block or mount) is required"},
		{"every capability counts", []*csi.VolumeCapability{capOf(rw, "ext4"), capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, "block")},
			"access mode MULTI_NODE_SINGLE_WRITER is not supported"},
		{"the mode is judged first", []*csi.VolumeCapability{capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, "btrfs")},
			"access mode MULTI_NODE_SINGLE_WRITER is not supported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// What no class allows is refused with or without the
			// consent to several writers.
			for _, multi := range []bool{false, true} {
				err := checkCapabilities(c.caps, multi)
				if (err == nil) != (c.says == "") || err != nil && err.Error() != c.says && !strings.HasPrefix(err.Error(), c.says) {
					t.Errorf("checkCapabilities(multiWriters %v) = %v, want %q", multi, err, c.says)
				}
			}
		})
	}
}

// TestCheckMultiNodeWriters: a writer on several nodes is served for raw
// block volumes of a class that consents, and never for a filesystem,
// whose refusal says why.
func TestCheckMultiNodeWriters(t *testing.T) {
	rwx := csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	for _, c := range []struct {
		name  string
		caps  []*csi.VolumeCapability
		multi bool
		says  string // "" is accepted
	}{
		{"block, the class consents", []*csi.VolumeCapability{capOf(rwx, "block")}, true, ""},
		{"block, the class does not", []*csi.VolumeCapability{capOf(rwx, "block")}, false, "writers on several nodes (ReadWriteMany) need a PillarStorageClass with multiNodeBlockWriters: true"},
		{"ext4, the class consents", []*csi.VolumeCapability{capOf(rwx, "ext4")}, true, "a filesystem volume cannot have writers on several nodes: ext4 and xfs mounted on two nodes at once"},
		{"xfs, the class does not", []*csi.VolumeCapability{capOf(rwx, "xfs")}, false, "a filesystem volume cannot have writers on several nodes"},
		{"the default filesystem", []*csi.VolumeCapability{capOf(rwx, "")}, true, "a filesystem volume cannot have writers on several nodes"},
		{"block among others", []*csi.VolumeCapability{capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "block"), capOf(rwx, "block")}, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkCapabilities(c.caps, c.multi)
			if (err == nil) != (c.says == "") || err != nil && !strings.HasPrefix(err.Error(), c.says) {
				t.Errorf("checkCapabilities = %v, want %q", err, c.says)
			}
		})
	}
}

func TestCompatible(t *testing.T) {
	rec := func(proto string) *v1alpha1.PillarVolumeState {
		return &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: volID},
			Spec: v1alpha1.PillarVolumeStateSpec{StoreName: "tank", ProtocolName: v1alpha1.ObjectName(proto), CapacityBytes: 8 << 20}}
	}
	for _, c := range []struct {
		name         string
		v            *v1alpha1.PillarVolumeState
		store, proto string
		r            *csi.CapacityRange
		code         codes.Code
		says         string
	}{
		{"the same request", rec("tcp"), "tank", "tcp", &csi.CapacityRange{RequiredBytes: 8 << 20}, codes.OK, ""},
		{"no range", rec("tcp"), "tank", "tcp", nil, codes.OK, ""},
		{"a range around the size", rec("tcp"), "tank", "tcp", &csi.CapacityRange{RequiredBytes: 1 << 20, LimitBytes: 16 << 20}, codes.OK, ""},
		{"another store", rec("tcp"), "other", "tcp", nil, codes.AlreadyExists, `volume ` + volID + ` exists in store "tank", not "other"`},
		{"another protocol", rec("tcp"), "tank", "rdma", nil, codes.AlreadyExists, `exists with protocol "tcp", not "rdma"`},
		// Records of early releases name no protocol: any is accepted.
		{"a record without a protocol", rec(""), "tank", "rdma", nil, codes.OK, ""},
		{"smaller than required", rec("tcp"), "tank", "tcp", &csi.CapacityRange{RequiredBytes: 16 << 20}, codes.AlreadyExists,
			"exists with 8388608 bytes, outside the requested range 16777216..0"},
		{"larger than the limit", rec("tcp"), "tank", "tcp", &csi.CapacityRange{LimitBytes: 4 << 20}, codes.AlreadyExists,
			"outside the requested range 0..4194304"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantStatus(t, "compatible", compatible(c.v, c.store, c.proto, false, c.r), c.code, c.says)
		})
	}
	// A class's consent to several writers is part of the volume.
	multi := rec("tcp")
	multi.Spec.MultiNodeBlockWriters = true
	wantStatus(t, "compatible", compatible(multi, "tank", "tcp", true, nil), codes.OK, "")
	wantStatus(t, "compatible", compatible(multi, "tank", "tcp", false, nil), codes.AlreadyExists, "exists with multiNodeBlockWriters true, not false")
	wantStatus(t, "compatible", compatible(rec("tcp"), "tank", "tcp", true, nil), codes.AlreadyExists, "exists with multiNodeBlockWriters false, not true")
}

func TestPublicationOf(t *testing.T) {
	req := func(vol, node string, c *csi.VolumeCapability, ro bool) *csi.ControllerPublishVolumeRequest {
		return &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: node, VolumeCapability: c, Readonly: ro}
	}
	rw := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4")
	nodeA := "worker-a/" + nqnA
	for _, c := range []struct {
		name string
		req  *csi.ControllerPublishVolumeRequest
		want v1alpha1.Publication
		node string // the node name parsed
		code codes.Code
		says string
	}{
		{"read-write", req(volID, nodeA, rw, false), pub("worker-a", nqnA, rwo, false), "worker-a", codes.OK, ""},
		{"read-only reader", req(volID, nodeA, capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "block"), true),
			pub("worker-a", nqnA, rox, true), "worker-a", codes.OK, ""},
		{"single writer", req(volID, nodeA, capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, "xfs"), false),
			pub("worker-a", nqnA, rwop, false), "worker-a", codes.OK, ""},
		{"read-write asked read-only", req(volID, nodeA, rw, true), pub("worker-a", nqnA, rwo, true), "worker-a", codes.OK, ""},
		{"no volume", req("", nodeA, rw, false), v1alpha1.Publication{}, "", codes.InvalidArgument, "volume ID is required"},
		{"no node", req(volID, "", rw, false), v1alpha1.Publication{}, "", codes.InvalidArgument, "node ID is required"},
		{"no capability", req(volID, nodeA, nil, false), v1alpha1.Publication{}, "", codes.InvalidArgument, "volume capability is required"},
		{"multi-node writers of a filesystem", req(volID, nodeA, capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "ext4"), false),
			v1alpha1.Publication{}, "", codes.InvalidArgument, "volume " + volID + ": a filesystem volume cannot have writers on several nodes"},
		{"multi-node single writer", req(volID, nodeA, capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, "block"), false),
			v1alpha1.Publication{}, "", codes.InvalidArgument, "volume " + volID + ": access mode MULTI_NODE_SINGLE_WRITER is not supported"},
		{"unserved filesystem", req(volID, nodeA, capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "zfs"), false),
			v1alpha1.Publication{}, "", codes.InvalidArgument, `filesystem "zfs" is not supported`},
		{"a node ID without a host NQN", req(volID, "worker-a", rw, false), v1alpha1.Publication{}, "", codes.NotFound, `node "worker-a": `},
		{"a node ID whose NQN is not one", req(volID, "worker-a/not-an-nqn", rw, false), v1alpha1.Publication{}, "", codes.NotFound, `node "worker-a": invalid node ID: host NQN`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, node, err := publicationOf(c.req)
			wantStatus(t, "publicationOf", err, c.code, c.says)
			if got != c.want || node.NodeName != c.node {
				t.Errorf("publicationOf = %+v on %q, want %+v on %q", got, node.NodeName, c.want, c.node)
			}
		})
	}
}

func TestSharedHostNQN(t *testing.T) {
	csiNode := func(name string, drivers ...storagev1.CSINodeDriver) storagev1.CSINode {
		return storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{Drivers: drivers}}
	}
	ours := func(id string) storagev1.CSINodeDriver { return storagev1.CSINodeDriver{Name: driver.Name, NodeID: id} }
	nodeA := export.NodeID{NodeName: "worker-a", HostNQN: nqnA}
	for _, c := range []struct {
		name  string
		nodes []storagev1.CSINode
		says  []string // "" is allowed
	}{
		{"no CSINodes", nil, nil},
		{"only its own", []storagev1.CSINode{csiNode("worker-a", ours("worker-a/"+nqnA))}, nil},
		// Its own CSINode is skipped even when it states another NQN
		// (a node whose hostnqn was just regenerated).
		{"its own with another NQN", []storagev1.CSINode{csiNode("worker-a", ours("worker-a/"+nqnB))}, nil},
		{"others with their own NQNs", []storagev1.CSINode{csiNode("worker-a", ours("worker-a/"+nqnA)), csiNode("worker-b", ours("worker-b/"+nqnB))}, nil},
		{"another node with the same NQN", []storagev1.CSINode{csiNode("worker-a", ours("worker-a/"+nqnA)), csiNode("worker-c", ours("worker-c/"+nqnA))},
			[]string{"volume " + volID + ": node worker-a presents the NVMe host NQN of node worker-c (their CSINodes show it):", "Nodes sharing a host NQN"}},
		{"several, named in order", []storagev1.CSINode{csiNode("worker-d", ours("worker-d/"+nqnA)), csiNode("worker-c", ours("worker-c/"+nqnA))},
			[]string{"the NVMe host NQN of node worker-c, worker-d (their CSINodes show it):"}},
		{"another driver's node ID does not count", []storagev1.CSINode{csiNode("worker-b", storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "worker-b/" + nqnA})}, nil},
		{"a node ID that does not parse does not count", []storagev1.CSINode{csiNode("worker-b", ours(nqnA))}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := sharedHostNQN(volID, nodeA, c.nodes)
			if c.says == nil {
				wantStatus(t, "sharedHostNQN", err, codes.OK)
			} else {
				wantStatus(t, "sharedHostNQN", err, codes.FailedPrecondition, c.says...)
				noHostNQN(t, "sharedHostNQN", err)
			}
		})
	}
}

func TestPublishable(t *testing.T) {
	rec := func(export, created, exported, deleting bool) *v1alpha1.PillarVolumeState {
		v := &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: volID}}
		if export {
			v.Spec.Export = &v1alpha1.ExportSpec{BindAddress: "192.0.2.10", Port: 4420, ACLEnabled: ptr.To(true)}
		}
		v.Status.BackendCreated, v.Status.Exported = created, exported
		if deleting {
			v.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return v
	}
	for _, c := range []struct {
		name string
		v    *v1alpha1.PillarVolumeState
		code codes.Code
		says string
	}{
		{"no record", nil, codes.NotFound, "volume " + volID + ": no such volume"},
		{"being deleted", rec(true, true, true, true), codes.NotFound, "no such volume"},
		{"no export spec", rec(false, true, true, false), codes.FailedPrecondition, "has no export spec (ExportSpecMissing)"},
		{"not provisioned", rec(true, false, false, false), codes.FailedPrecondition, "the volume is not provisioned yet"},
		{"provisioned, export unfinished", rec(true, true, false, false), codes.OK, ""},
		{"exported", rec(true, true, true, false), codes.OK, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantStatus(t, "publishable", publishable(volID, c.v), c.code, c.says)
		})
	}
}

func TestAdmit(t *testing.T) {
	for _, c := range []struct {
		name string
		have []v1alpha1.Publication
		want v1alpha1.Publication
		add  bool
		code codes.Code
		says string
	}{
		{"empty record, read-write", nil, pub("worker-a", nqnA, rwo, false), true, codes.OK, ""},
		{"empty record, single writer", nil, pub("worker-a", nqnA, rwop, false), true, codes.OK, ""},
		{"empty record, reader", nil, pub("worker-a", nqnA, rox, true), true, codes.OK, ""},
		{"the same node again", pubs(pub("worker-a", nqnA, rwo, false)), pub("worker-a", nqnA, rwo, false), false, codes.OK, ""},
		{"the same reader again", pubs(pub("worker-a", nqnA, rox, true), pub("worker-b", nqnB, rox, true)), pub("worker-b", nqnB, rox, true), false, codes.OK, ""},
		{"the same node, another mode", pubs(pub("worker-a", nqnA, rwo, false)), pub("worker-a", nqnA, rwop, false), false, codes.AlreadyExists,
			"volume " + volID + " is published to node worker-a with ReadWriteOnce (read-only false), not ReadWriteOncePod (read-only false)"},
		{"the same node, read-only now", pubs(pub("worker-a", nqnA, rwo, false)), pub("worker-a", nqnA, rwo, true), false, codes.AlreadyExists,
			"with ReadWriteOnce (read-only false), not ReadWriteOnce (read-only true)"},
		{"the same reader, read-write flag now", pubs(pub("worker-a", nqnA, rox, true)), pub("worker-a", nqnA, rox, false), false, codes.AlreadyExists,
			"with ReadOnlyMany (read-only true), not ReadOnlyMany (read-only false)"},
		// The node's own publication is judged first: the same node
		// never meets the exclusivity rule, even next to a writer.
		{"the same node as a reader, a writer elsewhere", pubs(pub("worker-b", nqnB, rwo, false), pub("worker-a", nqnA, rox, true)),
			pub("worker-a", nqnA, rwo, false), false, codes.AlreadyExists, "with ReadOnlyMany (read-only true), not ReadWriteOnce"},
		{"read-write to a second node", pubs(pub("worker-a", nqnA, rwo, false)), pub("worker-b", nqnB, rwo, false), false, codes.FailedPrecondition,
			"volume " + volID + ": already published to node worker-a with ReadWriteOnce; a ReadWriteOnce volume is published to one node at a time: unpublish it there first"},
		{"single writer to a second node", pubs(pub("worker-a", nqnA, rwop, false)), pub("worker-b", nqnB, rwop, false), false, codes.FailedPrecondition,
			"with ReadWriteOncePod; a ReadWriteOncePod volume"},
		{"a reader next to a writer", pubs(pub("worker-a", nqnA, rwo, false)), pub("worker-b", nqnB, rox, true), false, codes.FailedPrecondition,
			"node worker-a with ReadWriteOnce; a ReadWriteOnce volume"},
		{"a writer next to a reader", pubs(pub("worker-a", nqnA, rox, true)), pub("worker-b", nqnB, rwo, false), false, codes.FailedPrecondition,
			"node worker-a with ReadOnlyMany; a ReadWriteOnce volume"},
		{"a single writer next to readers names the first", pubs(pub("worker-a", nqnA, rox, true), pub("worker-b", nqnB, rox, true)),
			pub("worker-c", nqnC, rwop, false), false, codes.FailedPrecondition, "node worker-a with ReadOnlyMany; a ReadWriteOncePod volume"},
		{"a second reader", pubs(pub("worker-a", nqnA, rox, true)), pub("worker-b", nqnB, rox, true), true, codes.OK, ""},
		{"a third reader", pubs(pub("worker-a", nqnA, rox, true), pub("worker-b", nqnB, rox, false)), pub("worker-c", nqnC, rox, true), true, codes.OK, ""},
		// A mode this release does not know (a record written by hand
		// or by a newer release) is exclusive: refusing is the safe side.
		{"a recorded mode of unknown kind", pubs(pub("worker-a", nqnA, "ReadWriteSometimes", false)), pub("worker-b", nqnB, rox, true), false, codes.FailedPrecondition,
			"with ReadWriteSometimes; a ReadWriteSometimes volume"},
		// Another node that presents the same NQN is another node here;
		// sharedHostNQN refuses that case before the record is read.
		{"another node name, the same NQN, readers", pubs(pub("worker-a", nqnA, rox, true)), pub("worker-c", nqnA, rox, true), true, codes.OK, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAdmit(t, &v1alpha1.PillarVolumeState{Spec: v1alpha1.PillarVolumeStateSpec{Publications: c.have}}, c.want, c.add, c.code, c.says)
		})
	}
}

// TestAdmitMultiNodeWriters: ReadWriteMany publications of a volume whose
// class consents (multi) are many, one per node, and mix with no other
// mode; without the consent there is none.
func TestAdmitMultiNodeWriters(t *testing.T) {
	for _, c := range []struct {
		name  string
		have  []v1alpha1.Publication
		want  v1alpha1.Publication
		add   bool
		code  codes.Code
		says  string
		multi bool
	}{
		{"the first multi-node writer", nil, pub("worker-a", nqnA, rwx, false), true, codes.OK, "", true},
		{"a second multi-node writer", pubs(pub("worker-a", nqnA, rwx, false)), pub("worker-b", nqnB, rwx, false), true, codes.OK, "", true},
		{"a third multi-node writer", pubs(pub("worker-a", nqnA, rwx, false), pub("worker-b", nqnB, rwx, false)), pub("worker-c", nqnC, rwx, false), true, codes.OK, "", true},
		{"the same multi-node writer again", pubs(pub("worker-a", nqnA, rwx, false), pub("worker-b", nqnB, rwx, false)), pub("worker-b", nqnB, rwx, false), false, codes.OK, "", true},
		{"a multi-node writer, the class does not consent", nil, pub("worker-a", nqnA, rwx, false), false, codes.FailedPrecondition,
			"writers on several nodes (ReadWriteMany) need a PillarStorageClass with multiNodeBlockWriters: true", false},
		{"a multi-node writer next to a single-node writer", pubs(pub("worker-a", nqnA, rwo, false)), pub("worker-b", nqnB, rwx, false), false, codes.FailedPrecondition,
			"already published to node worker-a with ReadWriteOnce; a ReadWriteOnce volume is published to one node at a time", true},
		{"a single-node writer next to multi-node writers", pubs(pub("worker-a", nqnA, rwx, false)), pub("worker-b", nqnB, rwo, false), false, codes.FailedPrecondition,
			"already published to node worker-a with ReadWriteMany; a ReadWriteOnce volume is published to one node at a time", true},
		{"a reader next to multi-node writers", pubs(pub("worker-a", nqnA, rwx, false)), pub("worker-b", nqnB, rox, true), false, codes.FailedPrecondition,
			"already published to node worker-a with ReadWriteMany; a volume is published ReadWriteMany or ReadOnlyMany, not both at once", true},
		{"a multi-node writer next to readers", pubs(pub("worker-a", nqnA, rox, true)), pub("worker-b", nqnB, rwx, false), false, codes.FailedPrecondition,
			"a volume is published ReadOnlyMany or ReadWriteMany, not both at once", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAdmit(t, &v1alpha1.PillarVolumeState{Spec: v1alpha1.PillarVolumeStateSpec{Publications: c.have, MultiNodeBlockWriters: c.multi}}, c.want, c.add, c.code, c.says)
		})
	}
}

// checkAdmit asserts admit's decision on want against v: whether it adds,
// the code and message, no host NQN in the message, and the record's
// publications left as they were.
func checkAdmit(t *testing.T, v *v1alpha1.PillarVolumeState, want v1alpha1.Publication, wantAdd bool, code codes.Code, says string) {
	t.Helper()
	before := slices.Clone(v.Spec.Publications)
	add, err := admit(volID, v, want)
	wantStatus(t, "admit", err, code, says)
	noHostNQN(t, "admit", err)
	if add != wantAdd {
		t.Errorf("admit added %v, want %v", add, wantAdd)
	}
	if !slices.Equal(v.Spec.Publications, before) {
		t.Errorf("admit changed the record's publications: %v", v.Spec.Publications)
	}
}

func TestUnpublish(t *testing.T) {
	rec := func(acl *bool, p ...v1alpha1.Publication) *v1alpha1.PillarVolumeState {
		v := &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: volID}, Spec: v1alpha1.PillarVolumeStateSpec{Publications: p}}
		if acl != nil {
			v.Spec.Export = &v1alpha1.ExportSpec{BindAddress: "192.0.2.10", Port: 4420, ACLEnabled: acl}
		}
		return v
	}
	on, off := ptr.To(true), ptr.To(false)
	a, b := pub("worker-a", nqnA, rox, true), pub("worker-b", nqnB, rox, true)
	// worker-a2 presents worker-a's NQN: a record from before
	// sharedHostNQN refused that.
	a2 := pub("worker-a2", nqnA, rox, true)
	for _, c := range []struct {
		name       string
		v          *v1alpha1.PillarVolumeState
		node       string
		gone, keep []v1alpha1.Publication
		deny       []string
	}{
		{"empty record", rec(on), a.NodeID, nil, nil, nil},
		{"the only publication", rec(on, pub("worker-a", nqnA, rwo, false)), a.NodeID, pubs(pub("worker-a", nqnA, rwo, false)), nil, []string{nqnA}},
		{"a node it is not published to", rec(on, a), b.NodeID, nil, pubs(a), nil},
		{"one reader of two", rec(on, a, b), a.NodeID, pubs(a), pubs(b), []string{nqnA}},
		{"every node", rec(on, a, b), "", pubs(a, b), nil, []string{nqnA, nqnB}},
		{"every node of an unpublished volume", rec(on), "", nil, nil, nil},
		{"a host NQN another publication keeps", rec(on, a, a2, b), a.NodeID, pubs(a), pubs(a2, b), nil},
		{"a host NQN two publications leave, denied once", rec(on, a, b, a2), "", pubs(a, b, a2), nil, []string{nqnA, nqnB}},
		{"host ACLs off", rec(off, a, b), a.NodeID, pubs(a), pubs(b), nil},
		{"no export spec", rec(nil, a), a.NodeID, pubs(a), nil, nil},
		// Node IDs are compared whole: another NQN on the same node name
		// is another publication (the node's hostnqn changed).
		{"the same node name with another NQN", rec(on, a), "worker-a/" + nqnB, nil, pubs(a), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := slices.Clone(c.v.Spec.Publications)
			u := unpublish(c.v, c.node)
			if !slices.Equal(u.gone, c.gone) || !slices.Equal(u.keep, c.keep) || !slices.Equal(u.deny, c.deny) {
				t.Errorf("unpublish = gone %v, keep %v, deny %v; want gone %v, keep %v, deny %v", u.gone, u.keep, u.deny, c.gone, c.keep, c.deny)
			}
			if !slices.Equal(c.v.Spec.Publications, before) {
				t.Errorf("unpublish changed the record: %v", c.v.Spec.Publications)
			}
		})
	}
}

func TestStoresOn(t *testing.T) {
	stores := []v1alpha1.PillarStore{
		{ObjectMeta: metav1.ObjectMeta{Name: "tank"}, Spec: v1alpha1.PillarStoreSpec{AgentName: "storage-1", Type: v1alpha1.BackendZFS, ZFS: &v1alpha1.ZFSStore{Pool: "tank"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "vg"}, Spec: v1alpha1.PillarStoreSpec{AgentName: "storage-1", Type: v1alpha1.BackendLVM, LVM: &v1alpha1.LVMStore{VolumeGroup: "vg0"}}},
		// A store without its backend's section cannot be named to the
		// agent; its volumes are not pushed.
		{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: v1alpha1.PillarStoreSpec{AgentName: "storage-1", Type: v1alpha1.BackendZFS}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: v1alpha1.PillarStoreSpec{AgentName: "storage-2", Type: v1alpha1.BackendZFS, ZFS: &v1alpha1.ZFSStore{Pool: "p"}}},
	}
	for _, c := range []struct {
		agent string
		want  []v1alpha1.ObjectName
	}{
		{"storage-1", []v1alpha1.ObjectName{"tank", "vg"}},
		{"storage-2", []v1alpha1.ObjectName{"other"}},
		{"storage-3", nil},
	} {
		got := storesOn(stores, c.agent)
		if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, c.want) {
			t.Errorf("storesOn(%s) = %v, want %v", c.agent, names, c.want)
		}
		for name, st := range got {
			if st.proto.GetName() != string(name) || st.obj.Name != string(name) {
				t.Errorf("storesOn(%s)[%s] names %q (%s)", c.agent, name, st.proto.GetName(), st.obj.Name)
			}
		}
	}
}

func TestPushed(t *testing.T) {
	tank := &agentv1.Store{Name: "tank"}
	stores := map[v1alpha1.ObjectName]storeRef{"tank": {obj: &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: "tank", UID: "uid-tank"}}, proto: tank}}
	rec := func(store string, export, exported, deleting bool) *v1alpha1.PillarVolumeState {
		v := &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: volID}, Spec: v1alpha1.PillarVolumeStateSpec{StoreName: v1alpha1.ObjectName(store), StoreUID: "uid-tank"}}
		if export {
			v.Spec.Export = &v1alpha1.ExportSpec{BindAddress: "192.0.2.10", Port: 4420, ACLEnabled: ptr.To(true)}
		}
		v.Status.BackendCreated, v.Status.Exported = true, exported
		if deleting {
			v.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return v
	}
	for _, c := range []struct {
		name string
		v    *v1alpha1.PillarVolumeState
		want bool
	}{
		{"exported on this agent", rec("tank", true, true, false), true},
		{"on another agent's store", rec("other", true, true, false), false},
		// Its CreateVolume has not finished: the retry exports it.
		{"not exported yet", rec("tank", true, false, false), false},
		// ExportSpecMissing: the controller never guesses an export.
		{"no export spec", rec("tank", false, true, false), false},
		{"being deleted", rec("tank", true, true, true), false},
		// The store of that name is another one now: its pool may not hold
		// the volume.
		{"created in a replaced store", func() *v1alpha1.PillarVolumeState {
			v := rec("tank", true, true, false)
			v.Spec.StoreUID = "uid-old-tank"
			return v
		}(), false},
		{"recorded without a store UID", func() *v1alpha1.PillarVolumeState {
			v := rec("tank", true, true, false)
			v.Spec.StoreUID = ""
			return v
		}(), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, ok := pushed(c.v, stores)
			if ok != c.want || ok && st != tank || !ok && st != nil {
				t.Errorf("pushed = %v, %v; want %v", st, ok, c.want)
			}
		})
	}
	if exported(nil) {
		t.Error("a record that is gone is exported")
	}
}

func TestSameStore(t *testing.T) {
	store := func(uid, adopt string) *v1alpha1.PillarStore {
		st := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: "tank", UID: types.UID(uid)}}
		if adopt != "" {
			st.Annotations = map[string]string{v1alpha1.AnnotationAdoptStoreUID: adopt}
		}
		return st
	}
	rec := func(uid string) *v1alpha1.PillarVolumeState {
		return &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: volID}, Spec: v1alpha1.PillarVolumeStateSpec{StoreName: "tank", StoreUID: types.UID(uid)}}
	}
	for _, c := range []struct {
		name string
		v    *v1alpha1.PillarVolumeState
		st   *v1alpha1.PillarStore
		ok   bool
	}{
		{"the store it was created in", rec("u1"), store("u1", ""), true},
		{"a record of an older release, matched by name", rec(""), store("u2", ""), true},
		{"a store recreated under the name", rec("u1"), store("u2", ""), false},
		{"a recreated store that adopts the volume's store", rec("u1"), store("u2", "u1"), true},
		{"a recreated store that adopts another", rec("u1"), store("u2", "u0"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := sameStore(c.v, c.st)
			if (err == nil) != c.ok {
				t.Fatalf("sameStore = %v, want ok %v", err, c.ok)
			}
			if err != nil && (status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "kubectl annotate pillarstore tank pillar-csi.io/adopt-store-uid=u1")) {
				t.Errorf("the refusal %v is not FAILED_PRECONDITION with the command that adopts", err)
			}
		})
	}
}

func TestDesiredExport(t *testing.T) {
	tok := &agentv1.FencingToken{LifecycleUid: "uid-1", PublicationGeneration: 7}
	store := &agentv1.Store{Name: "tank"}
	rec := func(nqn string, acl bool, p ...v1alpha1.Publication) *v1alpha1.PillarVolumeState {
		return &v1alpha1.PillarVolumeState{ObjectMeta: metav1.ObjectMeta{Name: volID}, Spec: v1alpha1.PillarVolumeStateSpec{Publications: p,
			Export: &v1alpha1.ExportSpec{BindAddress: "192.0.2.10", Port: 4421, ACLEnabled: ptr.To(acl), SubsystemNQN: v1alpha1.NQN(nqn)}}}
	}
	want := func(nqn string, acl bool, hosts ...string) *agentv1.DesiredExport {
		return &agentv1.DesiredExport{FencingToken: tok, VolumeId: volID, Store: store, SubsystemNqn: nqn, AllowedHostNqns: hosts,
			Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: "192.0.2.10", Port: 4421, AclEnabled: acl}}}
	}
	const recorded = "nqn.2026-01.io.pillar-csi:volume:recorded"
	derived := "nqn.2026-01.io.pillar-csi:volume:" + volID
	for _, c := range []struct {
		name string
		v    *v1alpha1.PillarVolumeState
		want *agentv1.DesiredExport
	}{
		{"unpublished", rec(recorded, true), want(recorded, true)},
		{"each publication's host", rec(recorded, true, pub("worker-a", nqnA, rox, true), pub("worker-b", nqnB, rox, true)),
			want(recorded, true, nqnA, nqnB)},
		{"a host two publications share, once", rec(recorded, true, pub("worker-a", nqnA, rox, true), pub("worker-a2", nqnA, rox, true), pub("worker-b", nqnB, rox, true)),
			want(recorded, true, nqnA, nqnB)},
		// With host ACLs off every host may connect: no list is sent,
		// so none is made on the agent that would then be enforced.
		{"host ACLs off", rec(recorded, false, pub("worker-a", nqnA, rwo, false)), want(recorded, false)},
		// Records of early releases state no subsystem NQN: the one
		// api/export derives from the volume ID, as the export was made.
		{"a record without a subsystem NQN", rec("", true, pub("worker-a", nqnA, rwo, false)), want(derived, true, nqnA)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := desiredExport(c.v, store, tok); !proto.Equal(got, c.want) {
				t.Errorf("desiredExport =\n%v\nwant\n%v", got, c.want)
			}
		})
	}
}

func TestTally(t *testing.T) {
	resp := &agentv1.ReconcileResponse{
		Results: []*agentv1.ReconcileResult{
			{VolumeId: "pvc-b", Code: int32(codes.OK)},
			{VolumeId: "pvc-c", Code: int32(codes.FailedPrecondition), Message: "stale",
				FencingRejection: &agentv1.FencingRejection{Reason: agentv1.FencingRejection_REASON_STALE_GENERATION}},
			{VolumeId: "pvc-a", Code: int32(codes.OK)},
			{VolumeId: "pvc-d", Code: int32(codes.Internal), Message: "configfs: EBUSY"},
		},
		RetainedSubsystemNqns: []string{"nqn.2026-01.io.pillar-csi:volume:pvc-gone", "nqn.2026-01.io.pillar-csi:volume:pvc-earlier-batch"},
	}
	out := Pushed{Failed: map[string]string{"pvc-e": "earlier"}, Busy: []string{"pvc-f"}}
	tally(&out, resp, map[string]bool{"pvc-a": true, "pvc-b": true, "pvc-c": true, "pvc-d": true, "pvc-earlier-batch": true})
	if !slices.Equal(out.Restored, []string{"pvc-a", "pvc-b"}) {
		t.Errorf("restored %v, want pvc-a and pvc-b, sorted", out.Restored)
	}
	wantFailed := map[string]string{
		"pvc-c": "FailedPrecondition: fencing REASON_STALE_GENERATION: stale",
		"pvc-d": "Internal: configfs: EBUSY",
		"pvc-e": "earlier",
	}
	if !maps.Equal(out.Failed, wantFailed) {
		t.Errorf("failed %v, want %v", out.Failed, wantFailed)
	}
	if !slices.Equal(out.Retained, resp.RetainedSubsystemNqns[:1]) || !slices.Equal(out.Busy, []string{"pvc-f"}) {
		t.Errorf("retained %v, busy %v", out.Retained, out.Busy)
	}
	if out.Done() {
		t.Error("a push with failures is done")
	}
}

// TestReconcileBatches: a node with 10,000 exports, each with three
// allowed hosts, is pushed in requests that each fit the agent's message
// limit with room for the response; only the last sweeps; every entry is
// sent once, in order.
func TestReconcileBatches(t *testing.T) {
	if got := reconcileBatches(nil, reconcileBatchBytes); len(got) != 1 || got[0].GetPartial() || len(got[0].GetExports()) != 0 {
		t.Errorf("no exports: %v, want one request that sweeps", got)
	}
	desired := make([]*agentv1.DesiredExport, 10000)
	for i := range desired {
		id := fmt.Sprintf("pvc-%08d-0000-4000-8000-000000000000", i)
		desired[i] = &agentv1.DesiredExport{
			FencingToken: &agentv1.FencingToken{LifecycleUid: "7b0c3c52-4d2e-4c55-9f21-000000000001", PublicationGeneration: 12},
			VolumeId:     id, SubsystemNqn: export.SubsystemNQNPrefix + id,
			Store:     &agentv1.Store{Name: "fast", Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: "tank", ParentDataset: "pillar", Sparse: true}}},
			Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: "192.0.2.10", Port: 4420, AclEnabled: true}},
			AllowedHostNqns: []string{
				"nqn.2014-08.org.nvmexpress:uuid:6f1c3a52-0d4e-4b8e-9a39-2d7d0a1b0001",
				"nqn.2014-08.org.nvmexpress:uuid:6f1c3a52-0d4e-4b8e-9a39-2d7d0a1b0002",
				"nqn.2014-08.org.nvmexpress:uuid:6f1c3a52-0d4e-4b8e-9a39-2d7d0a1b0003",
			},
		}
	}
	// One request would be 4.17 MB: within the agent's 4 MiB, but not
	// with its response, which names each entry's export again.
	if n := proto.Size(&agentv1.ReconcileRequest{Exports: desired}); 2*n <= agentv1.MaxMessageSize {
		t.Fatalf("the whole set is %d bytes, which fits the %d the agent accepts together with its response: the test proves nothing", n, agentv1.MaxMessageSize)
	}
	batches := reconcileBatches(desired, reconcileBatchBytes)
	var sent []*agentv1.DesiredExport
	for i, b := range batches {
		if n := proto.Size(b); n > reconcileBatchBytes {
			t.Errorf("batch %d is %d bytes, more than %d", i, n, reconcileBatchBytes)
		}
		if last := i == len(batches)-1; b.GetPartial() == last {
			t.Errorf("batch %d of %d: partial %v", i, len(batches), b.GetPartial())
		}
		sent = append(sent, b.GetExports()...)
	}
	if len(batches) < 5 || !slices.Equal(sent, desired) {
		t.Errorf("%d batches carry %d entries; want every one of the %d once, in order, in at least 5 batches", len(batches), len(sent), len(desired))
	}
}

// noHostNQN fails when err names a worker's host NQN: the errors of
// ControllerPublishVolume reach a VolumeAttachment and the events of the
// pod that waits for it, which tenants read.
func noHostNQN(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, nqn := range []string{nqnA, nqnB, nqnC} {
		if strings.Contains(err.Error(), nqn) {
			t.Errorf("%s: %v names the host NQN %s", what, err, nqn)
		}
	}
}

// TestHeldBy: the events of a hand-over name every node that holds the
// volume, by node name, and say nothing more for a single publication.
func TestHeldBy(t *testing.T) {
	a, b := pub("worker-a", nqnA, rwx, false), pub("worker-b", nqnB, rwx, false)
	for _, c := range []struct {
		pubs  []v1alpha1.Publication
		least int
		want  string
	}{
		{pubs(a), 2, ""},
		{pubs(a, b), 2, "; now published to worker-a, worker-b"},
		{nil, 1, ""},
		{pubs(b), 1, "; now published to worker-b"},
	} {
		got := heldBy(c.pubs, c.least)
		if got != c.want {
			t.Errorf("heldBy(%v, %d) = %q, want %q", c.pubs, c.least, got, c.want)
		}
		noHostNQN(t, "heldBy", errors.New(got))
	}
}
