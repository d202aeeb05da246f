//go:build kernel

package agent

import (
	"testing"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// TestVolumeReports: on real stores, the Volume of CreateVolume,
// ExpandVolume and ListVolumes names the device the backend opens
// (device_path), and an agent restarted on the same marks counts the
// volumes that exist.
func TestVolumeReports(t *testing.T) {
	guest.RequireGuest(t)
	for _, mk := range []func(testing.TB) labStore{
		func(t testing.TB) labStore { return newLVM(t, false) },
		newZFS,
	} {
		s := mk(t)
		t.Run(s.name, func(t *testing.T) {
			gen := t.TempDir()
			a := startAgent(t, gen)
			tk := tok(fixture.RandomUUID(t), 1)
			ids := []string{"pvc-report-a", "pvc-report-b"}
			for _, id := range ids {
				r, err := a.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store, CapacityBytes: 32 * mib})
				if err != nil {
					t.Fatal(err)
				}
				dev, err := s.backend.DevicePath(ctxT(t), id)
				if err != nil {
					t.Fatal(err)
				}
				if got := r.GetVolume().GetDevicePath(); got != dev {
					t.Errorf("CreateVolume %s: device_path %q, the backend's device %q", id, got, dev)
				}
			}
			x, err := a.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tk, VolumeId: ids[0], Store: s.store, CapacityBytes: 48 * mib})
			if err != nil {
				t.Fatal(err)
			}
			dev, err := s.backend.DevicePath(ctxT(t), ids[0])
			if err != nil {
				t.Fatal(err)
			}
			if got := x.GetVolume().GetDevicePath(); got != dev {
				t.Errorf("ExpandVolume: device_path %q, the backend's device %q", got, dev)
			}
			l, err := a.c.ListVolumes(ctxT(t), &agentv1.ListVolumesRequest{Store: s.store})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.GetVolumes()) != len(ids) {
				t.Fatalf("ListVolumes = %v, want %q", l.GetVolumes(), ids)
			}
			for _, v := range l.GetVolumes() {
				dev, err := s.backend.DevicePath(ctxT(t), v.GetVolumeId())
				if err != nil {
					t.Fatal(err)
				}
				if v.GetDevicePath() != dev {
					t.Errorf("ListVolumes %s: device_path %q, the backend's device %q", v.GetVolumeId(), v.GetDevicePath(), dev)
				}
			}

			// One volume deleted, then a restart on the same marks.
			if _, err := a.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: ids[1], Store: s.store}); err != nil {
				t.Fatal(err)
			}
			a.stop()
			b := startAgent(t, gen)
			if n := b.srv.Stats().Volumes; n != 1 {
				t.Errorf("the restarted agent counts %d volumes, want 1", n)
			}
			if _, err := b.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: ids[0], Store: s.store}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
