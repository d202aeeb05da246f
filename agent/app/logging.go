package app

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// readOnly are the calls that change nothing. They are logged at debug
// level when they succeed; everything else, including any method added to
// the API later, is logged at info.
var readOnly = map[string]bool{
	agentv1.AgentService_GetAgentInfo_FullMethodName: true,
	agentv1.AgentService_GetCapacity_FullMethodName:  true,
	agentv1.AgentService_ListVolumes_FullMethodName:  true,
	agentv1.AgentService_ListExports_FullMethodName:  true,
	healthpb.Health_Check_FullMethodName:             true,
	healthpb.Health_List_FullMethodName:              true,
}

// logInterceptor logs one record per unary call: method, code, duration,
// the caller's address and, when the request names one, the volume ID.
// Requests are not logged whole: the agent API carries no secrets today,
// but a field added later might.
func logInterceptor(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		level := callLevel(info.FullMethod, err)
		if !logger.Enabled(ctx, level) {
			return resp, err
		}
		st := status.Convert(err)
		attrs := make([]slog.Attr, 0, 6)
		attrs = append(attrs,
			slog.String("method", info.FullMethod),
			slog.String("code", st.Code().String()),
			slog.Float64("duration_seconds", time.Since(start).Seconds()))
		if v, ok := req.(interface{ GetVolumeId() string }); ok && v.GetVolumeId() != "" {
			attrs = append(attrs, slog.String("volume_id", v.GetVolumeId()))
		}
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			attrs = append(attrs, slog.String("peer", p.Addr.String()))
		}
		if err != nil {
			attrs = append(attrs, slog.String("error", st.Message()))
		}
		logger.LogAttrs(ctx, level, "rpc", attrs...)
		return resp, err
	}
}

// callLevel: a failure the agent caused (INTERNAL, UNKNOWN, DATA_LOSS) is
// an error; any other failure and every change is info, because refusals
// such as fencing's FAILED_PRECONDITION are the agent working as designed;
// successful reads are debug.
func callLevel(method string, err error) slog.Level {
	switch status.Code(err) {
	case codes.OK:
		if readOnly[method] {
			return slog.LevelDebug
		}
		return slog.LevelInfo
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}
