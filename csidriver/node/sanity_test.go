package node

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/csidriver/identity"
	"github.com/pillar-csi/pillar-csi/csidriver/server"
)

// sanityController is the least controller csi-sanity needs to drive the
// node service: it "creates" a volume by exporting it in the fake
// initiator tree and hands out the volume context pillar-controller would.
// It is not the Controller service.
type sanityController struct {
	csi.UnimplementedControllerServer
	e      *env
	mu     sync.Mutex
	byName map[string]*csi.Volume
	n      int
}

func (c *sanityController) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (c *sanityController) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.byName[req.GetName()]; ok {
		return &csi.CreateVolumeResponse{Volume: v}, nil
	}
	c.n++
	id := fmt.Sprintf("sanity-%d", c.n)
	size := req.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		size = gib
	}
	c.e.fake.Export(id, "192.0.2.10", 4420, size)
	v := &csi.Volume{VolumeId: id, CapacityBytes: size, VolumeContext: volumeContext(id)}
	c.byName[req.GetName()] = v
	return &csi.CreateVolumeResponse{Volume: v}, nil
}

func (c *sanityController) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, v := range c.byName {
		if v.GetVolumeId() == req.GetVolumeId() {
			delete(c.byName, name)
		}
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (c *sanityController) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	size := req.GetCapacityRange().GetRequiredBytes()
	c.e.fake.Grow(req.GetVolumeId(), size)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: true}, nil
}

func (c *sanityController) ControllerPublishVolume(context.Context, *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	return &csi.ControllerPublishVolumeResponse{}, nil
}

func (c *sanityController) ControllerUnpublishVolume(context.Context, *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// TestSanity runs csi-sanity's Node and Identity specs against the node
// service in-process, over a unix socket, with the fake initiator tree,
// mounter and command runner.
func TestSanity(t *testing.T) {
	e := newEnv(t)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := server.Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	g := server.New(server.Services{
		Identity:   identity.New(e.svc.Ready, true),
		Node:       e.svc,
		Controller: &sanityController{e: e, byName: map[string]*csi.Volume{}},
	}, e.svc.log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, g, l, time.Second) }()
	defer func() { cancel(); <-done }()

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(t.TempDir(), "target")
	cfg.StagingPath = filepath.Join(t.TempDir(), "staging")
	cfg.TestVolumeSize = gib
	cfg.IdempotentCount = 2
	sc := sanity.GinkgoTest(&cfg)
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	// The controller above is a stand-in: only the node and identity
	// specs say anything about this package.
	suite.FocusStrings = []string{"Node Service", "Identity Service"}
	reporter.Succinct = true
	reporter.NoColor = true
	ginkgo.RunSpecs(t, "pillar-node csi-sanity", suite, reporter)
	sc.Finalize()
}
