package controller_test

import (
	"context"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// TestPushExports: a storage-node reboot empties configfs; the push puts
// every exported volume's export back, with exactly the hosts of its
// publications, each under a fresh token.
func TestPushExports(t *testing.T) {
	ctx := context.Background()
	s := newService(t)
	pub, idle := uniq("pvc-push-pub"), uniq("pvc-push-idle")
	for _, id := range []string{pub, idle} {
		if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: pub, NodeId: nodeA, VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	before := record(t, pub).Spec.PublicationGeneration

	agent.WipeExports()
	got, err := newService(t).PushExports(ctx, "storage-1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Restored, pub) || !slices.Contains(got.Restored, idle) || !got.Done() {
		t.Errorf("pushed = %+v, want %s and %s restored, nothing failed", got, pub, idle)
	}
	ex := agent.Exports()
	if e, ok := ex[pub]; !ok || !e.ACL || !slices.Equal(e.Hosts, []string{hostA}) {
		t.Errorf("export of the published volume = %+v, %v: want ACL on with node A's host only", e, ok)
	}
	if e, ok := ex[idle]; !ok || len(e.Hosts) != 0 {
		t.Errorf("export of the unpublished volume = %+v, %v: want no host", e, ok)
	}
	if g := record(t, pub).Spec.PublicationGeneration; g != before+1 {
		t.Errorf("generation %d after the push, want %d: one fresh token per entry", g, before+1)
	}

	// Clean up, with the exports gone again: teardown and unpublish take
	// that in their stride.
	agent.WipeExports()
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: idle}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: pub, NodeId: nodeA}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: pub}); err != nil {
		t.Fatal(err)
	}
}
