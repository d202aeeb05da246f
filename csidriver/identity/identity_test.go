package identity

import (
	"context"
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/csidriver/driver"
)

func TestPluginInfo(t *testing.T) {
	r, err := New(nil, false).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || r.GetName() != "pillar-csi.io" || r.GetVendorVersion() != driver.Version {
		t.Fatalf("GetPluginInfo = %v, %v", r, err)
	}
}

func TestCapabilities(t *testing.T) {
	for _, controller := range []bool{false, true} {
		r, err := New(nil, controller).GetPluginCapabilities(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		has := false
		for _, c := range r.GetCapabilities() {
			if c.GetService().GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE {
				has = true
			}
		}
		if has != controller {
			t.Errorf("controller=%v: CONTROLLER_SERVICE reported %v", controller, has)
		}
	}
}

func TestProbe(t *testing.T) {
	ready := errors.New("/dev/nvme-fabrics missing")
	s := New(func(context.Context) error { return ready }, false)
	_, err := s.Probe(context.Background(), &csi.ProbeRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Probe while not ready = %v", err)
	}
	ready = nil
	r, err := s.Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || !r.GetReady().GetValue() {
		t.Fatalf("Probe when ready = %v, %v", r, err)
	}
}
