package server

import (
	"path/filepath"
	"testing"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// TestVolumeDevicePath: every Volume the API returns (CreateVolume,
// ExpandVolume, ListVolumes) names the volume's block device, as
// agent.proto promises.
func TestVolumeDevicePath(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-dev"
	want := filepath.Join(h.devDir, id)
	cr, err := h.create(id, tok(uid1, 1), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.GetVolume().GetDevicePath(); got != want {
		t.Errorf("CreateVolume device_path %q, want %q", got, want)
	}
	// A retried create reports it too.
	if cr, err = h.create(id, tok(uid1, 1), 1<<20); err != nil || cr.GetVolume().GetDevicePath() != want {
		t.Errorf("retried CreateVolume = %v, %v; want device_path %q", cr, err, want)
	}
	xr, err := h.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: id, Store: lvmStore, CapacityBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if got := xr.GetVolume().GetDevicePath(); got != want {
		t.Errorf("ExpandVolume device_path %q, want %q", got, want)
	}
	lr, err := h.c.ListVolumes(ctxT(t), &agentv1.ListVolumesRequest{Store: lvmStore})
	if err != nil {
		t.Fatal(err)
	}
	if v := lr.GetVolumes(); len(v) != 1 || v[0].GetVolumeId() != id || v[0].GetDevicePath() != want {
		t.Errorf("ListVolumes = %v, want %s on %s", v, id, want)
	}
}

// TestCreateWithoutDevice: a volume whose device cannot be found is still
// created; the answer leaves device_path empty and the log says why.
func TestCreateWithoutDevice(t *testing.T) {
	h := newHarness(t)
	h.be.noDevice = true
	cr, err := h.create("pvc-nodev", tok(uid1, 1), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.GetVolume().GetDevicePath(); got != "" {
		t.Errorf("device_path %q of a volume without a device", got)
	}
	found := false
	for _, r := range h.logs.records(t) {
		if r["msg"] == "device lookup failed; the volume is reported without its device" && r["volume_id"] == "pvc-nodev" {
			found = true
		}
	}
	if !found {
		t.Error("no log record of the failed device lookup")
	}
}
