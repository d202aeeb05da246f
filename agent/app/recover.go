package app

import (
	"context"
	"log/slog"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/agent/internal/metrics"
)

// recoverInterceptor turns a handler's panic into an INTERNAL answer. A
// storage node's agent serves every volume of the node: one bad request
// must not end the process and with it every other call in flight. The
// panic is logged with its stack and counted (pillar_agent_rpc_panics_total);
// the handler's deferred unlocks have run by then, so the volume is not
// left locked. What the handler had changed stays as it was, exactly as
// after a crash, and the next call for the volume converges from there.
func recoverInterceptor(logger *slog.Logger, m *metrics.Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = recovered(ctx, logger, m, info.FullMethod, req, p)
				resp = nil
			}
		}()
		return handler(ctx, req)
	}
}

// recoverStreamInterceptor is recoverInterceptor for streaming calls (the
// health service's Watch).
func recoverStreamInterceptor(logger *slog.Logger, m *metrics.Metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = recovered(ss.Context(), logger, m, info.FullMethod, nil, p)
			}
		}()
		return handler(srv, ss)
	}
}

func recovered(ctx context.Context, logger *slog.Logger, m *metrics.Metrics, method string, req any, p any) error {
	m.PanicRecovered(method)
	attrs := []any{"method", method, "panic", p, "stack", string(debug.Stack())}
	if v, ok := req.(interface{ GetVolumeId() string }); ok && v.GetVolumeId() != "" {
		attrs = append(attrs, "volume_id", v.GetVolumeId())
	}
	logger.ErrorContext(ctx, "handler panicked; the agent keeps serving", attrs...)
	return status.Errorf(codes.Internal, "pillar-agent: internal error in %s (a bug: the agent's log has the stack)", method)
}
