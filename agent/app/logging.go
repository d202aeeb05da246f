package app

import (
	"log/slog"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/logging"
)

// readOnly are the calls that change nothing. Their successes are logged
// at debug level: the controller polls them, and an info record each
// time would bury the changes.
var readOnly = []string{
	agentv1.AgentService_GetAgentInfo_FullMethodName,
	agentv1.AgentService_GetCapacity_FullMethodName,
	agentv1.AgentService_ListVolumes_FullMethodName,
	agentv1.AgentService_ListExports_FullMethodName,
	healthpb.Health_Check_FullMethodName,
	healthpb.Health_List_FullMethodName,
}

// logInterceptor logs one record per unary call, in the shape all
// pillar-csi binaries share (package logging).
func logInterceptor(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return logging.UnaryServerInterceptor(logger, readOnly...)
}
