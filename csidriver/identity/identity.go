// Package identity is the CSI Identity service of pillar-csi, shared by
// pillar-node and pillar-controller: plugin name and version, the
// plugin's capabilities, and a Probe that runs the serving binary's real
// readiness check.
package identity

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pillar-csi/pillar-csi/csidriver/driver"
)

// Service is the Identity service.
type Service struct {
	csi.UnimplementedIdentityServer
	ready      func(context.Context) error
	controller bool
}

// New returns the Identity service. ready is the readiness check Probe
// runs (nil: always ready); controller tells whether this plugin also
// serves the Controller service.
func New(ready func(context.Context) error, controller bool) *Service {
	return &Service{ready: ready, controller: controller}
}

// GetPluginInfo reports driver.Name and driver.Version.
func (s *Service) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driver.Name, VendorVersion: driver.Version}, nil
}

// GetPluginCapabilities reports the Controller service only when this
// plugin serves it; no topology constraints (NVMe/TCP reaches every node).
func (s *Service) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	if s.controller {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE},
		}})
	}
	caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE},
	}})
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe answers ready=true when the readiness check passes, and
// FailedPrecondition with the check's findings when it does not (the CSI
// spec's answer for "the plugin is not in a healthy state").
func (s *Service) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if s.ready != nil {
		if err := s.ready(ctx); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "not ready: %v", err)
		}
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
