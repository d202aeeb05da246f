package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

func TestLogInterceptorLevelsAndFields(t *testing.T) {
	for _, tc := range []struct {
		name      string
		method    string
		req       any
		err       error
		level     slog.Level // lowest level the logger is set to
		wantLevel string     // "" when nothing may be logged
		wantVol   string
	}{
		{"successful read at info is quiet", agentv1.AgentService_ListExports_FullMethodName, &agentv1.ListExportsRequest{}, nil, slog.LevelInfo, "", ""},
		{"successful read at debug", agentv1.AgentService_GetCapacity_FullMethodName, &agentv1.GetCapacityRequest{}, nil, slog.LevelDebug, "DEBUG", ""},
		{"mutation", agentv1.AgentService_ExportVolume_FullMethodName, &agentv1.ExportVolumeRequest{VolumeId: "pvc-9"}, nil, slog.LevelInfo, "INFO", "pvc-9"},
		{"fencing refusal", agentv1.AgentService_DeleteVolume_FullMethodName, &agentv1.DeleteVolumeRequest{VolumeId: "pvc-9"}, status.Error(codes.FailedPrecondition, "stale"), slog.LevelInfo, "INFO", "pvc-9"},
		{"failed read", agentv1.AgentService_GetCapacity_FullMethodName, &agentv1.GetCapacityRequest{}, status.Error(codes.FailedPrecondition, "no pool"), slog.LevelInfo, "INFO", ""},
		{"internal failure", agentv1.AgentService_ExportVolume_FullMethodName, &agentv1.ExportVolumeRequest{VolumeId: "pvc-9"}, status.Error(codes.Internal, "write enable: EBUSY"), slog.LevelWarn, "ERROR", "pvc-9"},
		{"request without a volume", agentv1.AgentService_Reconcile_FullMethodName, &agentv1.ReconcileRequest{}, nil, slog.LevelInfo, "INFO", ""},
		{"method added later is a mutation", "/pillar.agent.v1.AgentService/SnapshotVolume", nil, nil, slog.LevelInfo, "INFO", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			ic := logInterceptor(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level})))
			_, err := ic(context.Background(), tc.req, &grpc.UnaryServerInfo{FullMethod: tc.method},
				func(context.Context, any) (any, error) { return nil, tc.err })
			if err != tc.err {
				t.Fatalf("interceptor changed the error to %v", err)
			}
			if tc.wantLevel == "" {
				if buf.Len() != 0 {
					t.Fatalf("logged %s", buf.String())
				}
				return
			}
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("log %q: %v", buf.String(), err)
			}
			if rec["level"] != tc.wantLevel || rec["method"] != tc.method || rec["code"] != status.Code(tc.err).String() {
				t.Errorf("record %v: want level %s, method %s, code %s", rec, tc.wantLevel, tc.method, status.Code(tc.err))
			}
			if v, _ := rec["volume_id"].(string); v != tc.wantVol {
				t.Errorf("volume_id %q, want %q", v, tc.wantVol)
			}
			if _, ok := rec["duration_seconds"].(float64); !ok {
				t.Errorf("no duration_seconds in %v", rec)
			}
			if msg, _ := rec["error"].(string); (tc.err != nil) != (msg != "") {
				t.Errorf("error field %q for error %v", msg, tc.err)
			}
		})
	}
}
