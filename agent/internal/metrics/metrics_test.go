package metrics

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: HTTP %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func wantLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, "\n"+l+"\n") {
			t.Errorf("scrape lacks %q", l)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

func TestInterceptorAndGauges(t *testing.T) {
	var volumes atomic.Int64
	volumes.Store(3)
	notAfter := time.Unix(1900000000, 0)
	m := New(Config{
		Version: "v1.2.3", NodeName: "storage-1",
		Stats:               func() (int, int) { return int(volumes.Load()), 2 },
		CertificateNotAfter: func() time.Time { return notAfter },
	})
	ic := m.UnaryServerInterceptor()
	call := func(method string, err error) {
		info := &grpc.UnaryServerInfo{FullMethod: "/pillar.agent.v1.AgentService/" + method}
		_, got := ic(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, err })
		if got != err {
			t.Fatalf("interceptor changed the error: %v", got)
		}
	}
	call("GetAgentInfo", nil)
	call("GetAgentInfo", nil)
	call("CreateVolume", status.Error(codes.FailedPrecondition, "stale"))
	m.SetReady(true)

	const svc = `service="pillar.agent.v1.AgentService"`
	body := scrape(t, m)
	wantLines(t, body,
		`pillar_agent_rpc_duration_seconds_count{code="OK",method="GetAgentInfo",`+svc+`} 2`,
		`pillar_agent_rpc_duration_seconds_count{code="FailedPrecondition",method="CreateVolume",`+svc+`} 1`,
		`pillar_agent_rpc_errors_total{code="FailedPrecondition",method="CreateVolume",`+svc+`} 1`,
		`pillar_agent_volumes 3`,
		`pillar_agent_exports 2`,
		`pillar_agent_ready 1`,
		`pillar_agent_build_info{node="storage-1",version="v1.2.3"} 1`,
		`pillar_agent_tls_certificate_expiry_timestamp_seconds 1.9e+09`,
	)
	if strings.Contains(body, `pillar_agent_rpc_errors_total{code="OK"`) {
		t.Error("a successful call was counted as an error")
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, "\n"+name+" ") {
			t.Errorf("scrape lacks %s", name)
		}
	}

	// The gauges are read at scrape time.
	volumes.Store(7)
	m.SetReady(false)
	wantLines(t, scrape(t, m), `pillar_agent_volumes 7`, `pillar_agent_ready 0`)
}

func TestOptionalMetricsAbsent(t *testing.T) {
	body := scrape(t, New(Config{}))
	for _, name := range []string{"pillar_agent_volumes", "pillar_agent_tls_certificate_expiry_timestamp_seconds"} {
		if strings.Contains(body, name) {
			t.Errorf("%s exported without a source", name)
		}
	}
}

func TestSplitMethod(t *testing.T) {
	for in, want := range map[string][2]string{
		"/pillar.agent.v1.AgentService/CreateVolume": {"pillar.agent.v1.AgentService", "CreateVolume"},
		"/grpc.health.v1.Health/Check":               {"grpc.health.v1.Health", "Check"},
		"odd":                                        {"unknown", "odd"},
	} {
		if s, m := SplitMethod(in); s != want[0] || m != want[1] {
			t.Errorf("SplitMethod(%q) = %q, %q, want %q", in, s, m, want)
		}
	}
}
