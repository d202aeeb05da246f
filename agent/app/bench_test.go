package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"

	"github.com/pillar-csi/pillar-csi/agent/internal/metrics"
)

// BenchmarkUnaryCall measures one GetAgentInfo over an established
// loopback connection: on a bare grpc.Server (the floor), through Run
// (metrics and logging interceptors, keepalive and size limits), and
// through Run with the token check (the chart's default), and through Run
// with mutual TLS. The ratios against "bare" are what hosting costs per
// call; "agent-token" against "agent" is what the token check costs.
func BenchmarkUnaryCall(b *testing.B) {
	bare := func(b *testing.B) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		gs := grpc.NewServer()
		newFake().Register(gs)
		go func() { _ = gs.Serve(ln) }()
		b.Cleanup(gs.Stop)
		return ln.Addr().String()
	}
	for _, bc := range []struct {
		name  string
		setup func(b *testing.B) (addr string, creds credentials.TransportCredentials)
		token bool // the client sends testToken
	}{
		{"bare", func(b *testing.B) (string, credentials.TransportCredentials) { return bare(b), nil }, false},
		{"agent", func(b *testing.B) (string, credentials.TransportCredentials) {
			o := testOptions()
			o.LogLevel = slog.LevelInfo
			a := startBench(b, o)
			return a.grpcAddr, nil
		}, false},
		{"agent-token", func(b *testing.B) (string, credentials.TransportCredentials) {
			o := tokenOptions(b)
			o.LogLevel = slog.LevelInfo
			a := startBench(b, o)
			return a.grpcAddr, nil
		}, true},
		{"agent-mtls", func(b *testing.B) (string, credentials.TransportCredentials) {
			s := newTLSSetup(b)
			o := s.options()
			o.LogLevel = slog.LevelInfo
			a := startBench(b, o)
			return a.grpcAddr, clientCreds(s.srvCA.Pool(), s.client)
		}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			addr, creds := bc.setup(b)
			cc := dial(b, addr, creds)
			defer cc.Close()
			var opts []grpc.CallOption
			if bc.token {
				opts = append(opts, bearer(testToken))
			}
			if _, err := agentInfo(cc, opts...); err != nil {
				b.Fatal(err)
			}
			c := agentv1.NewAgentServiceClient(cc)
			ctx := b.Context()
			for b.Loop() {
				if _, err := c.GetAgentInfo(ctx, &agentv1.GetAgentInfoRequest{}, opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func startBench(b *testing.B, o Options) *agent {
	o.LogOutput = io.Discard
	a := &agent{svc: newFake(), done: make(chan error, 1)}
	bound := make(chan struct{})
	o.listening = func(g, _ net.Addr) { a.grpcAddr = g.String(); close(bound) }
	ctx, cancel := context.WithCancel(context.Background())
	go func() { a.done <- run(ctx, o, func(Options, *slog.Logger) (service, error) { return a.svc, nil }) }()
	select {
	case <-bound:
	case err := <-a.done:
		b.Fatal(err)
	}
	b.Cleanup(func() { cancel(); <-a.done })
	return a
}

// BenchmarkInterceptors is the per-call cost of the metrics and logging
// interceptors alone, without the network: a successful read (observed,
// not logged at info) and a mutation (observed and logged as JSON).
func BenchmarkInterceptors(b *testing.B) {
	m := metrics.New(metrics.Config{})
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	chain := []grpc.UnaryServerInterceptor{m.UnaryServerInterceptor(), logInterceptor(logger)}
	call := func(method string, req any) {
		info := &grpc.UnaryServerInfo{FullMethod: method}
		_, _ = chain[0](context.Background(), req, info, func(ctx context.Context, req any) (any, error) {
			return chain[1](ctx, req, info, func(context.Context, any) (any, error) { return nil, nil })
		})
	}
	b.Run("read", func(b *testing.B) {
		req := &agentv1.GetAgentInfoRequest{}
		for b.Loop() {
			call(agentv1.AgentService_GetAgentInfo_FullMethodName, req)
		}
	})
	b.Run("mutation", func(b *testing.B) {
		req := &agentv1.ExportVolumeRequest{VolumeId: "pvc-0123456789"}
		for b.Loop() {
			call(agentv1.AgentService_ExportVolume_FullMethodName, req)
		}
	})
}
