package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"google.golang.org/grpc"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// The record shape and the levels of failures are api/logging's, tested
// there; what is the agent's own is which successes are quiet.
func TestLogInterceptorQuietReads(t *testing.T) {
	for _, tc := range []struct {
		method    string
		wantLevel string
	}{
		{agentv1.AgentService_GetAgentInfo_FullMethodName, "DEBUG"},
		{agentv1.AgentService_GetCapacity_FullMethodName, "DEBUG"},
		{agentv1.AgentService_ListExports_FullMethodName, "DEBUG"},
		{"/grpc.health.v1.Health/Check", "DEBUG"},
		{agentv1.AgentService_ExportVolume_FullMethodName, "INFO"},
		{agentv1.AgentService_Reconcile_FullMethodName, "INFO"},
		{"/pillar.agent.v1.AgentService/SnapshotVolume", "INFO"}, // added later: a mutation until named
	} {
		t.Run(tc.method, func(t *testing.T) {
			var buf bytes.Buffer
			ic := logInterceptor(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
			if _, err := ic(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: tc.method},
				func(context.Context, any) (any, error) { return nil, nil }); err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("log %q: %v", buf.String(), err)
			}
			if rec["level"] != tc.wantLevel || rec["msg"] != "rpc" {
				t.Errorf("record %v: want rpc at %s", rec, tc.wantLevel)
			}
		})
	}
}
