package app

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/pillar-csi/pillar-csi/api/agentauth"
)

// healthPrefix is the one service every caller may use without a token:
// the kubelet's and the controller's health checks.
var healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

// authenticator refuses every call but health that does not carry an
// accepted token, before the call reaches the service, and logs who was
// refused.
type authenticator struct {
	tokens *agentauth.Accepted
	logger *slog.Logger
	log    refusalLog
}

// refusalLog logs refused calls at most once per refusalLogEvery, with the
// number left unlogged since, so a caller who knocks in a loop cannot fill
// the node's disk with the agent's log.
type refusalLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

const refusalLogEvery = time.Second

func (a *authenticator) check(ctx context.Context, method string) error {
	if strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	err := a.tokens.Verify(ctx)
	if err == nil {
		return nil
	}
	a.log.mu.Lock()
	now := time.Now()
	if now.Sub(a.log.last) < refusalLogEvery {
		a.log.suppressed++
		a.log.mu.Unlock()
		return agentauth.Refusal(err)
	}
	suppressed := a.log.suppressed
	a.log.last, a.log.suppressed = now, 0
	a.log.mu.Unlock()
	addr := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	attrs := []any{"method", method, "peer", addr, "reason", err.Error()}
	if suppressed > 0 {
		attrs = append(attrs, "refused_unlogged_since_last", suppressed)
	}
	if rerr := a.tokens.Err(); rerr != nil {
		attrs = append(attrs, "token_reload_error", rerr.Error())
	}
	a.logger.Warn("refused an unauthenticated call", attrs...)
	return agentauth.Refusal(err)
}

func (a *authenticator) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func (a *authenticator) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}
