package controller_test

import (
	"context"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// rwxBlock is a raw block capability with writers on several nodes.
var rwxBlock = &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}

// rwxReq is a CreateVolume of a raw block volume with writers on several
// nodes, from a class that consents (multi) or not.
func rwxReq(name string, multi bool) *csi.CreateVolumeRequest {
	req := createReq(name, 8<<20)
	req.VolumeCapabilities = []*csi.VolumeCapability{rwxBlock}
	if multi {
		req.Parameters[v1alpha1.StorageClassParamMultiNodeBlockWriters] = "true"
	}
	return req
}

// TestMultiNodeBlockWriters: a class that consents gives a raw block
// volume that two nodes are published to at once, each under its own
// token and each host on the export's access list; unpublishing one node
// takes exactly its host off and leaves the other working; a filesystem
// or a class without the consent gets no multi-node writer at all.
func TestMultiNodeBlockWriters(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)

	// Without the class's consent: refused, and nothing is made.
	none := uniq("pvc-rwx-refused")
	_, err := s.CreateVolume(ctx, rwxReq(none, false))
	wantCode(t, "CreateVolume of a multi-node writer without the consent", err, codes.InvalidArgument, "multiNodeBlockWriters: true")
	if _, ok := agent.Volumes()[none]; ok {
		t.Error("a refused CreateVolume made a volume")
	}

	id := uniq("pvc-rwx")
	if _, err := s.CreateVolume(ctx, rwxReq(id, true)); err != nil {
		t.Fatal(err)
	}
	if v := record(t, id); !v.Spec.MultiNodeBlockWriters {
		t.Fatalf("the record of a volume of a consenting class: multiNodeBlockWriters false")
	}
	vv, err := s.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{rwxBlock}})
	if err != nil || vv.GetConfirmed() == nil {
		t.Errorf("ValidateVolumeCapabilities of the volume's own mode: %v, %v", vv, err)
	}
	publish := func(node string) error {
		_, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: rwxBlock})
		return err
	}
	for _, node := range []string{nodeA, nodeB} {
		if err := publish(node); err != nil {
			t.Fatalf("publish to %s: %v", node, err)
		}
	}
	v := record(t, id)
	if len(v.Spec.Publications) != 2 || v.Spec.PublicationGeneration != 3 {
		t.Errorf("after two publications: %v at generation %d; want both nodes, each under a token of its own (3)", v.Spec.Publications, v.Spec.PublicationGeneration)
	}
	if got := agent.Presented("AllowHost", id); !slices.Equal(got, []uint64{2, 3}) {
		t.Errorf("AllowHost saw generations %v, want [2 3]: one token per publication", got)
	}
	if hosts := agent.Exports()[id].Hosts; !slices.Contains(hosts, hostA) || !slices.Contains(hosts, hostB) {
		t.Errorf("the export allows %v, want both hosts", hosts)
	}
	// A single-node writer cannot join, and a repeated publication is
	// the same one.
	_, err = s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "worker-c/nqn.2014-08.org.nvmexpress:uuid:cccccccc-0000-4000-8000-000000000003",
		VolumeCapability: &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}})
	wantCode(t, "a single-node writer beside multi-node writers", err, codes.FailedPrecondition, "with ReadWriteMany")
	if err := publish(nodeB); err != nil {
		t.Errorf("publish to node B again: %v", err)
	}

	// No expansion during the hand-over: refused while two nodes hold
	// it, done once one does.
	expand := func() (*csi.ControllerExpandVolumeResponse, error) {
		return s.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}, VolumeCapability: rwxBlock})
	}
	_, err = expand()
	wantCode(t, "expansion under two writers", err, codes.FailedPrecondition, "published ReadWriteMany to 2 nodes (worker-a, worker-b)")
	if got := agent.Volumes()[id].Size; got != 8<<20 {
		t.Errorf("a refused expansion grew the volume to %d bytes", got)
	}

	// Node A leaves: its host only is taken off.
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA}); err != nil {
		t.Fatal(err)
	}
	if hosts := agent.Exports()[id].Hosts; slices.Contains(hosts, hostA) || !slices.Contains(hosts, hostB) {
		t.Errorf("after node A's unpublication the export allows %v, want host B alone", hosts)
	}
	if v := record(t, id); len(v.Spec.Publications) != 1 || v.Spec.Publications[0].NodeID != nodeB {
		t.Errorf("after node A's unpublication: %v, want node B's", v.Spec.Publications)
	}
	if resp, err := expand(); err != nil || resp.GetCapacityBytes() < 16<<20 || resp.GetNodeExpansionRequired() {
		t.Errorf("expansion under one writer: %v, %v; want 16 MiB, no node expansion (a raw block volume)", resp, err)
	}
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeB}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}

	// A volume of a class without the consent is never published
	// ReadWriteMany, whatever the request says.
	plain := uniq("pvc-rwx-plain")
	req := createReq(plain, 8<<20)
	req.VolumeCapabilities = []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}}
	if _, err := s.CreateVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	_, err = s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: plain, NodeId: nodeA, VolumeCapability: rwxBlock})
	wantCode(t, "a multi-node writer of a volume whose class did not consent", err, codes.FailedPrecondition, "multiNodeBlockWriters: true")
	vv, err = s.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: plain, VolumeCapabilities: []*csi.VolumeCapability{rwxBlock}})
	if err != nil || vv.GetConfirmed() != nil {
		t.Errorf("ValidateVolumeCapabilities of ReadWriteMany on a volume whose class did not consent: %v, %v; want unconfirmed", vv, err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: plain}); err != nil {
		t.Fatal(err)
	}
}
