//go:build kernel

package controller

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const (
	// sanityVolumeSize is what csi-sanity creates its volumes with. The
	// StorageClass's filesystem is ext4 (mkfs.xfs would refuse anything
	// under 300 MB); a few specs hold several volumes at once, all in a
	// 1 GiB zpool or an 800 MiB thin pool.
	sanityVolumeSize = 64 * mib
	// sanityExpandSize is what the expansion specs grow a volume to.
	sanityExpandSize = 128 * mib
)

// TestCSISanity runs every spec of csi-sanity (csi-test v5, the version
// csidriver pins) against the real stack: pillar-controller's CSI socket
// for the Identity and Controller services, a bin/pillar-node process's
// for the Node service, with the parameters of the StorageClass a
// PillarStorageClass generated, once for a ZFS store and once for an LVM
// thin store. csi-sanity publishes to the node ID pillar-node reports, so
// every ControllerPublishVolume puts that node's host NQN on the
// subsystem's allowed_hosts and every NodeStageVolume connects the guest's
// kernel initiator, makes ext4 and mounts it. csi-sanity's node address
// is a router (csiRouter) that hands the Node methods to pillar-node and
// the Identity and Controller methods to pillar-controller: csi-sanity
// asks that address's Identity whether a Controller service exists, and
// without one it stages volumes it never published, which the subsystem's
// host ACL rightly refuses. Ginkgo's report says how many specs passed,
// failed and were skipped; each skip is logged with its reason (a
// capability pillar-csi does not offer).
func TestCSISanity(t *testing.T) {
	l := setup(t)
	s := newStack(t, l, "storage-sanity", backendZFS, backendLVMThin)
	w := s.startWorker("worker-sanity")
	router := startRouter(t, t.TempDir(), l.csiEndpoint, "unix://"+filepath.Join(w.dir, "csi.sock"))
	began := time.Now()

	var contexts []*sanity.TestContext
	for _, k := range []string{backendZFS, backendLVMThin} {
		st := s.stores[k]
		dir := filepath.Join(t.TempDir(), k)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := sanity.NewTestConfig()
		cfg.Address = router.endpoint
		cfg.ControllerAddress = l.csiEndpoint
		cfg.TargetPath = filepath.Join(dir, "target")
		cfg.StagingPath = filepath.Join(dir, "staging")
		cfg.TestVolumeSize = sanityVolumeSize
		cfg.TestVolumeExpandSize = sanityExpandSize
		cfg.TestVolumeParameters = st.params
		cfg.IdempotentCount = 2
		// Registering the suite inside a container of its own makes one
		// Ginkgo run (RunSpecs may be called once per process) cover both
		// stores, each spec named after its store.
		ginkgo.Describe(st.kind, func() {
			contexts = append(contexts, sanity.GinkgoTest(&cfg))
		})
	}
	ginkgo.ReportAfterSuite("pillar-csi csi-sanity counts", func(r types.Report) { logSanityReport(t, r) })
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	// Specs run in the order they are written, so a failure is easy to
	// match with the controller's and node's logs.
	suite.RandomizeAllSpecs = false
	suite.Timeout = 2 * time.Hour
	reporter.Succinct = true
	reporter.NoColor = true
	ginkgo.RunSpecs(t, "pillar-csi csi-sanity (real stack)", suite, reporter)
	for _, sc := range contexts {
		sc.Finalize()
	}
	t.Logf("csi-sanity on ZFS and LVM thin took %v (guest time)", time.Since(began).Round(time.Second))
	for _, k := range []string{backendZFS, backendLVMThin} {
		if ids := s.stores[k].backendVolumes(t); len(ids) != 0 {
			t.Errorf("csi-sanity left volumes in the %s store: %v", k, ids)
		}
	}
}

// logSanityReport logs, per store, how many specs passed, failed and were
// skipped, and every skipped spec with the reason csi-sanity gave.
func logSanityReport(t *testing.T, r types.Report) {
	type counts struct{ passed, failed, skipped int }
	by := map[string]*counts{}
	skips := map[string][]string{}
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt {
			continue
		}
		store := "?"
		if len(sr.ContainerHierarchyTexts) > 0 {
			store = sr.ContainerHierarchyTexts[0]
		}
		c := by[store]
		if c == nil {
			c = &counts{}
			by[store] = c
		}
		name := strings.Join(append(append([]string{}, sr.ContainerHierarchyTexts[1:]...), sr.LeafNodeText), " ")
		switch {
		case sr.State == types.SpecStatePassed:
			c.passed++
		case sr.State == types.SpecStateSkipped:
			c.skipped++
			skips[store] = append(skips[store], fmt.Sprintf("%s: %s", name, firstLine(sr.Failure.Message)))
		case sr.State.Is(types.SpecStateFailureStates):
			c.failed++
		}
	}
	stores := make([]string, 0, len(by))
	for k := range by {
		stores = append(stores, k)
	}
	sort.Strings(stores)
	for _, k := range stores {
		c := by[k]
		t.Logf("csi-sanity on %s: %d passed, %d failed, %d skipped", k, c.passed, c.failed, c.skipped)
		sort.Strings(skips[k])
		for _, s := range skips[k] {
			t.Logf("  skipped on %s: %s", k, s)
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// csiRouter is one CSI endpoint made of two plugins, as csi-sanity
// expects a driver to be: it asks the Identity service of its node
// address whether a Controller service exists (GetPluginCapabilities), and
// only then calls ControllerPublishVolume before NodeStageVolume. Here the
// Identity and Controller methods go to pillar-controller's socket and the
// Node methods to pillar-node's, byte for byte (no message is decoded or
// changed), so every call csi-sanity makes is answered by the real
// process that serves it in a cluster.
type csiRouter struct {
	endpoint string
	server   *grpc.Server
	ctrl     *grpc.ClientConn
	node     *grpc.ClientConn
}

// startRouter serves the router on a socket in dir until cleanup.
func startRouter(t testing.TB, dir, controllerEndpoint, nodeEndpoint string) *csiRouter {
	t.Helper()
	r := &csiRouter{endpoint: "unix://" + filepath.Join(dir, "csi-router.sock")}
	var err error
	if r.ctrl, err = grpc.NewClient(controllerEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	if r.node, err = grpc.NewClient(nodeEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "csi-router.sock"))
	if err != nil {
		t.Fatal(err)
	}
	r.server = grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(r.forward))
	go func() { _ = r.server.Serve(l) }()
	t.Cleanup(func() {
		r.server.Stop()
		r.ctrl.Close()
		r.node.Close()
	})
	return r
}

// forward relays one unary call (every CSI method is unary) to the plugin
// that serves its service, and the answer or status back.
func (r *csiRouter) forward(_ any, stream grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "no method in the stream")
	}
	conn := r.ctrl
	if strings.HasPrefix(method, "/csi.v1.Node/") {
		conn = r.node
	}
	var in, out rawFrame
	if err := stream.RecvMsg(&in); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(stream.Context(), csiTimeout)
	defer cancel()
	if err := conn.Invoke(ctx, method, &in, &out, grpc.ForceCodec(rawCodec{})); err != nil {
		return err
	}
	return stream.SendMsg(&out)
}

// rawFrame is a message as it travels, undecoded.
type rawFrame struct{ b []byte }

// rawCodec passes rawFrames through unchanged.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*rawFrame)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return f.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*rawFrame)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	f.b = append(f.b[:0], data...)
	return nil
}

// Name is the content subtype the plugins expect.
func (rawCodec) Name() string { return "proto" }
