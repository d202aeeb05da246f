// Package csisanity is what the suites that run csi-sanity (csi-test's
// sanity package) against pillar-csi's real processes share: a router
// that makes pillar-controller's and pillar-node's sockets one CSI
// endpoint, as csi-sanity expects a driver to be, and the report of a run
// by store with the reason of every skip.
package csisanity

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// LogReport logs, per top-level container (the store each run was
// registered under), how many specs passed, failed and were skipped, and
// every skipped spec with the reason csi-sanity gave.
func LogReport(t testing.TB, r types.Report) {
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

// Router is one CSI endpoint made of two plugins, as csi-sanity
// expects a driver to be: it asks the Identity service of its node
// address whether a Controller service exists (GetPluginCapabilities), and
// only then calls ControllerPublishVolume before NodeStageVolume. Here the
// Identity and Controller methods go to pillar-controller's socket and the
// Node methods to pillar-node's, byte for byte (no message is decoded or
// changed), so every call csi-sanity makes is answered by the real
// process that serves it in a cluster.
type Router struct {
	// Endpoint is the router's address (unix://…), for csi-sanity's
	// TestConfig.Address.
	Endpoint string
	server   *grpc.Server
	ctrl     *grpc.ClientConn
	node     *grpc.ClientConn
	timeout  time.Duration
}

// StartRouter serves a router on a socket in dir until the test's
// cleanup; each call it relays is bounded by callTimeout.
func StartRouter(t testing.TB, dir, controllerEndpoint, nodeEndpoint string, callTimeout time.Duration) *Router {
	t.Helper()
	r := &Router{Endpoint: "unix://" + filepath.Join(dir, "csi-router.sock"), timeout: callTimeout}
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
func (r *Router) forward(_ any, stream grpc.ServerStream) error {
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
	ctx, cancel := context.WithTimeout(stream.Context(), r.timeout)
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
