package controller_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/endpoint"
	"github.com/pillar-csi/pillar-csi/csidriver/identity"
)

// sanityNode is the least node csi-sanity's controller specs need: a node
// ID to publish to. The Node service has its own csi-sanity run
// (package node).
type sanityNode struct {
	csi.UnimplementedNodeServer
}

func (sanityNode) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: nodeA}, nil
}

// Cleanup of csi-sanity unpublishes and unstages whatever it published;
// nothing was staged here.
func (sanityNode) NodeUnpublishVolume(context.Context, *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (sanityNode) NodeUnstageVolume(context.Context, *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (sanityNode) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// TestSanity runs csi-sanity's Controller and Identity specs against the
// Controller service, on the real API server and the in-process agent.
func TestSanity(t *testing.T) {
	needServer(t)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := endpoint.Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	g := endpoint.New(endpoint.Services{Identity: identity.New(nil, true), Controller: newService(t), Node: sanityNode{}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- endpoint.Serve(ctx, g, l, time.Second) }()
	defer func() { cancel(); <-done }()

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(t.TempDir(), "target")
	cfg.StagingPath = filepath.Join(t.TempDir(), "staging")
	cfg.TestVolumeSize = 16 << 20
	cfg.TestVolumeExpandSize = 32 << 20
	cfg.IdempotentCount = 2
	cfg.TestVolumeParameters = map[string]string{v1alpha1.StorageClassParamStore: storeName, v1alpha1.StorageClassParamProtocol: protoName}
	sc := sanity.GinkgoTest(&cfg)
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	suite.FocusStrings = []string{"Controller Service", "Identity Service", "Snapshots? \\[Controller Server\\]"}
	reporter.Succinct = true
	reporter.NoColor = true
	ginkgo.RunSpecs(t, "pillar-controller csi-sanity", suite, reporter)
	sc.Finalize()
}
