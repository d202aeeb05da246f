package main

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
}

// The floor's controller answers at once with the volume asked for, the
// same one for a repeated request, and refuses what it cannot serve.
func TestCreateVolume(t *testing.T) {
	ctx := context.Background()
	var s controllerServer
	req := &csi.CreateVolumeRequest{Name: "pvc-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap()}}
	for range 2 {
		resp, err := s.CreateVolume(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if v := resp.GetVolume(); v.GetVolumeId() != "pvc-1" || v.GetCapacityBytes() != 32<<20 {
			t.Errorf("volume %v, want pvc-1 of 32 MiB", v)
		}
	}
	block := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	for name, bad := range map[string]*csi.CreateVolumeRequest{
		"no name":         {VolumeCapabilities: []*csi.VolumeCapability{mountCap()}},
		"no capabilities": {Name: "pvc-2"},
		"block":           {Name: "pvc-3", VolumeCapabilities: []*csi.VolumeCapability{block}},
	} {
		if _, err := s.CreateVolume(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("DeleteVolume without an ID: %v, want InvalidArgument", err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}); err != nil {
		t.Errorf("DeleteVolume: %v", err)
	}
}

// Only the controller side announces the Controller service: the
// external-provisioner needs it, and kubelet's registration does not.
func TestPluginCapabilities(t *testing.T) {
	for _, controller := range []bool{true, false} {
		resp, err := identity{controller: controller}.GetPluginCapabilities(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(resp.GetCapabilities()) == 1; got != controller {
			t.Errorf("controller %v: capabilities %v", controller, resp.GetCapabilities())
		}
	}
}

func TestIsMountPoint(t *testing.T) {
	if got, err := isMountPoint(t.TempDir()); err != nil || got {
		t.Errorf("a fresh directory: mount point %v (%v), want false", got, err)
	}
	if got, err := isMountPoint("/proc"); err != nil || !got {
		t.Errorf("/proc: mount point %v (%v), want true", got, err)
	}
}
