// Command floor-csi is a CSI driver that does nothing but answer: the
// floor of make e2e-perf. CreateVolume and DeleteVolume return at once,
// there is no attach (its CSIDriver says attachRequired: false), and a
// published volume is an empty tmpfs of 1 MiB at the target path. Run with
// the same sidecars and flags as pillar-csi, it measures what provisioning
// a claim and starting its pod cost the cluster itself: the sidecars'
// queues and rate limits, the API server's writes, the scheduler and the
// kubelet. It keeps no state; a volume's ID is its name.
//
// One binary serves both sides: -controller serves Identity and
// Controller (beside csi-provisioner, as pillar-controller), without it
// Identity and Node, registering itself with kubelet as pillar-node does
// (csidriver/registration).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/pillar-csi/pillar-csi/csidriver/registration"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DriverName is the floor driver's CSI name.
const DriverName = "floor.csi.pillar-csi.io"

func main() {
	endpoint := flag.String("endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix://path)")
	controller := flag.Bool("controller", false, "serve the Controller service; without it the Node service")
	nodeID := flag.String("node-id", "", "this node's name (Node service)")
	regDir := flag.String("plugin-registration-dir", registration.DefaultDir, "kubelet's plugin registration directory (Node service)")
	regPath := flag.String("kubelet-registration-path", "/var/lib/kubelet/plugins/"+DriverName+"/csi.sock", "the CSI socket as kubelet sees it (Node service)")
	flag.Parse()
	var reg *registration.Registrar
	if !*controller {
		if *nodeID == "" {
			fmt.Fprintln(os.Stderr, "floor-csi: -node-id is required without -controller")
			os.Exit(2)
		}
		var err error
		if reg, err = registration.New(registration.Config{Dir: *regDir, Endpoint: *regPath, DriverName: DriverName}); err != nil {
			fmt.Fprintf(os.Stderr, "floor-csi: %v\n", err)
			os.Exit(2)
		}
	}
	if err := serve(*endpoint, *controller, *nodeID, reg); err != nil {
		fmt.Fprintf(os.Stderr, "floor-csi: %v\n", err)
		os.Exit(1)
	}
}

// serve serves the CSI endpoint until SIGTERM and, with reg, kubelet's
// registration once the endpoint listens (kubelet calls NodeGetInfo as
// soon as it reads the registration).
func serve(endpoint string, controller bool, nodeID string, reg *registration.Registrar) error {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return fmt.Errorf("endpoint %q: only unix:// is served", endpoint)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logErrors))
	csi.RegisterIdentityServer(srv, identity{controller: controller})
	if controller {
		csi.RegisterControllerServer(srv, controllerServer{})
	} else {
		csi.RegisterNodeServer(srv, nodeServer{id: nodeID})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	if reg != nil {
		go func() {
			if err := reg.Run(ctx); err != nil {
				slog.Error("registration with kubelet ended", "error", err)
				stop()
			}
		}()
	}
	slog.Info("serving", "endpoint", endpoint, "controller", controller, "node", nodeID)
	return srv.Serve(l)
}

// logErrors logs every call that fails: the floor must not fail, and a
// failure is the first thing to read when it does.
func logErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		slog.Error("call failed", "method", info.FullMethod, "error", err)
	}
	return resp, err
}

type identity struct {
	csi.UnimplementedIdentityServer
	controller bool
}

func (identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: "0.0.0"}, nil
}

func (i identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	if i.controller {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

type controllerServer struct {
	csi.UnimplementedControllerServer
}

func (controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}},
	}}}, nil
}

// CreateVolume returns a volume of the size asked for, named as the
// request, at once: the same request always gives the same volume.
func (controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range req.GetVolumeCapabilities() {
		if c.GetMount() == nil {
			return nil, status.Error(codes.InvalidArgument, "only filesystem volumes are served")
		}
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      req.GetName(),
		CapacityBytes: req.GetCapacityRange().GetRequiredBytes(),
	}}, nil
}

func (controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" || len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume ID and capabilities are required")
	}
	for _, c := range req.GetVolumeCapabilities() {
		if c.GetMount() == nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: "only filesystem volumes are served"}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities()}}, nil
}

type nodeServer struct {
	csi.UnimplementedNodeServer
	id string
}

func (n nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.id}, nil
}

func (nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume mounts an empty tmpfs of 1 MiB at the target path;
// one that is already a mount point is published.
func (nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if req.GetVolumeId() == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID and target path are required")
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "target %s: %v", target, err)
	}
	if mounted, err := isMountPoint(target); err != nil {
		return nil, status.Errorf(codes.Internal, "target %s: %v", target, err)
	} else if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	var flags uintptr
	if req.GetReadonly() {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", flags, "size=1m,mode=0777"); err != nil {
		return nil, status.Errorf(codes.Internal, "mount tmpfs at %s: %v", target, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts the target path, if mounted, and removes
// it.
func (nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if req.GetVolumeId() == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID and target path are required")
	}
	if err := unix.Unmount(target, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove %s: %v", target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// isMountPoint reports whether path is on another device than its parent.
func isMountPoint(path string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, err
	}
	if err := unix.Stat(filepath.Dir(path), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}
