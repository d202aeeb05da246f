package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"

	"github.com/pillar-csi/pillar-csi/agent/internal/testpki"
	"github.com/pillar-csi/pillar-csi/agent/server"
	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

// fakeService stands in for the agent's AgentService: GetAgentInfo
// answers, CreateVolume fails with FAILED_PRECONDITION, except for volume
// "slow", which blocks until release is closed and then succeeds, and
// volume "panic", whose handler panics.
type fakeService struct {
	agentv1.UnimplementedAgentServiceServer

	readyErr atomic.Pointer[error]
	stats    server.Stats
	closed   atomic.Int32
	// driftChecks counts RestoreDrift calls.
	driftChecks atomic.Int32
	started     chan struct{} // receives when a slow call starts
	release     chan struct{}
}

func newFake() *fakeService {
	return &fakeService{stats: server.Stats{Volumes: 5, Exports: 3}, started: make(chan struct{}, 1), release: make(chan struct{})}
}

func (f *fakeService) Register(g grpc.ServiceRegistrar) { agentv1.RegisterAgentServiceServer(g, f) }
func (f *fakeService) Stats() server.Stats              { return f.stats }
func (f *fakeService) Close() error                     { f.closed.Add(1); return nil }
func (f *fakeService) Ready(context.Context) error {
	if p := f.readyErr.Load(); p != nil {
		return *p
	}
	return nil
}
func (f *fakeService) setReady(err error) { f.readyErr.Store(&err) }

func (f *fakeService) RestoreDrift(context.Context) (int, error) {
	f.driftChecks.Add(1)
	return 0, nil
}
func (f *fakeService) ExportsRestored() uint64 { return 7 }

func (f *fakeService) GetAgentInfo(context.Context, *agentv1.GetAgentInfoRequest) (*agentv1.GetAgentInfoResponse, error) {
	return &agentv1.GetAgentInfoResponse{NodeName: "storage-1"}, nil
}

func (f *fakeService) CreateVolume(ctx context.Context, req *agentv1.CreateVolumeRequest) (*agentv1.CreateVolumeResponse, error) {
	if req.GetVolumeId() == "panic" {
		panic("fake handler bug")
	}
	if req.GetVolumeId() == "slow" {
		f.started <- struct{}{}
		select {
		case <-f.release:
			return &agentv1.CreateVolumeResponse{}, nil
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return nil, status.Error(codes.FailedPrecondition, "stale generation")
}

// agent is one Run on loopback.
type agent struct {
	grpcAddr, httpAddr string
	svc                *fakeService
	logs               *syncbuf.Buffer
	cancel             context.CancelFunc
	done               chan error
}

func testOptions() Options {
	o := DefaultOptions()
	o.NodeName = "storage-1"
	o.Version = "v0.0.0-test"
	o.ListenAddress = "127.0.0.1:0"
	o.MetricsAddress = "127.0.0.1:0"
	o.ReadinessInterval = 20 * time.Millisecond
	o.ShutdownGracePeriod = 5 * time.Second
	o.LogLevel = slog.LevelDebug
	// The token check has tests of its own (auth_test.go).
	o.AllowUnauthenticated = true
	return o
}

// start runs the agent and waits until it listens. The test fails if Run
// has not returned by the end of the test.
func start(t *testing.T, o Options, svc *fakeService) *agent {
	t.Helper()
	a := &agent{svc: svc, logs: &syncbuf.Buffer{}, done: make(chan error, 1)}
	o.LogOutput = a.logs
	bound := make(chan struct{})
	o.listening = func(g, h net.Addr) {
		a.grpcAddr = g.String()
		if h != nil {
			a.httpAddr = h.String()
		}
		close(bound)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- run(ctx, o, func(Options, *slog.Logger) (service, error) { return svc, nil }) }()
	select {
	case <-bound:
	case err := <-a.done:
		t.Fatalf("Run returned before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not listen within 10s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
	return a
}

// stop cancels Run and returns its result.
func (a *agent) stop(t *testing.T) error {
	t.Helper()
	a.cancel()
	select {
	case err := <-a.done:
		a.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
		return nil
	}
}

func dial(t testing.TB, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func healthCheck(cc *grpc.ClientConn, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

func agentInfo(cc *grpc.ClientConn, opts ...grpc.CallOption) (*agentv1.GetAgentInfoResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return agentv1.NewAgentServiceClient(cc).GetAgentInfo(ctx, &agentv1.GetAgentInfoRequest{}, opts...)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPlaintextServes(t *testing.T) {
	a := start(t, testOptions(), newFake())
	cc := dial(t, a.grpcAddr, nil)
	for _, svc := range []string{"", "pillar.agent.v1.AgentService"} {
		if st, err := healthCheck(cc, svc); err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v, %v; want SERVING", svc, st, err)
		}
	}
	if info, err := agentInfo(cc); err != nil || info.GetNodeName() != "storage-1" {
		t.Fatalf("GetAgentInfo = %v, %v", info, err)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
	if n := a.svc.closed.Load(); n != 1 {
		t.Fatalf("Close called %d times, want 1", n)
	}
}

// tlsSetup is a server CA, a client CA and a client certificate of it, and
// server files in a directory.
type tlsSetup struct {
	srvCA, cliCA *testpki.CA
	files        testpki.Files
	client       tls.Certificate
}

func newTLSSetup(t testing.TB) tlsSetup {
	s := tlsSetup{srvCA: testpki.NewCA(t, "agent servers"), cliCA: testpki.NewCA(t, "controllers")}
	s.files = testpki.WriteFiles(t, t.TempDir(), s.srvCA.Server(t, "agent"), s.cliCA.CertPEM)
	s.client = s.cliCA.Client(t, "pillar-controller").TLS(t)
	return s
}

func (s tlsSetup) options() Options {
	o := testOptions()
	o.TLS.CertFile, o.TLS.KeyFile, o.TLS.CAFile = s.files.Cert, s.files.Key, s.files.CA
	return o
}

func clientCreds(roots *x509.CertPool, certs ...tls.Certificate) credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: certs, ServerName: "127.0.0.1"})
}

func TestMutualTLS(t *testing.T) {
	s := newTLSSetup(t)
	a := start(t, s.options(), newFake())
	roots := s.srvCA.Pool()

	good := dial(t, a.grpcAddr, clientCreds(roots, s.client))
	if st, err := healthCheck(good, ""); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health with a valid client certificate = %v, %v", st, err)
	}
	var p peer.Peer
	if _, err := agentInfo(good, grpc.Peer(&p)); err != nil {
		t.Fatalf("GetAgentInfo with a valid client certificate: %v", err)
	}
	if v := p.AuthInfo.(credentials.TLSInfo).State.Version; v != tls.VersionTLS13 {
		t.Errorf("negotiated TLS version %x, want 1.3", v)
	}

	refused := map[string]credentials.TransportCredentials{
		"no client certificate":       clientCreds(roots),
		"certificate of another CA":   clientCreds(roots, testpki.NewCA(t, "controllers").Client(t, "pillar-controller").TLS(t)),
		"expired client certificate":  clientCreds(roots, s.cliCA.Issue(t, "pillar-controller", false, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Minute)).TLS(t)),
		"plaintext client":            insecure.NewCredentials(),
		"server CA used as client CA": clientCreds(roots, s.srvCA.Client(t, "pillar-controller").TLS(t)),
	}
	for name, creds := range refused {
		t.Run(name, func(t *testing.T) {
			cc := dial(t, a.grpcAddr, creds)
			_, err := agentInfo(cc)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("GetAgentInfo = %v, want UNAVAILABLE (connection refused by the TLS handshake)", err)
			}
		})
	}
}

// servedSerial makes a fresh connection (a new handshake) and returns the
// serial of the certificate the agent presented.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool, client tls.Certificate) string {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(clientCreds(roots, client)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var p peer.Peer
	if _, err := agentInfo(cc, grpc.Peer(&p)); err != nil {
		t.Fatalf("GetAgentInfo: %v", err)
	}
	return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber.String()
}

func TestTLSRotationWithoutRestart(t *testing.T) {
	s := newTLSSetup(t)
	a := start(t, s.options(), newFake())
	roots := s.srvCA.Pool()
	long := dial(t, a.grpcAddr, clientCreds(roots, s.client))
	if _, err := agentInfo(long); err != nil {
		t.Fatal(err)
	}

	second := s.srvCA.Server(t, "agent")
	testpki.WriteFiles(t, s.files.Dir, second, s.cliCA.CertPEM)
	if got := servedSerial(t, a.grpcAddr, roots, s.client); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after rotation the agent presented serial %s, want %s", got, second.Cert.SerialNumber)
	}

	// A garbage rotation: handshakes keep getting the last good material.
	testpki.WriteAtomic(t, s.files.Cert, []byte("-----BEGIN CERTIFICATE-----\ntruncated"))
	if got := servedSerial(t, a.grpcAddr, roots, s.client); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after a garbage rotation the agent presented serial %s, want %s", got, second.Cert.SerialNumber)
	}
	if !strings.Contains(a.logs.String(), "still serving the previous certificate") {
		t.Errorf("the failed rotation was not logged:\n%s", a.logs)
	}
	// The connection made before the rotations keeps working.
	if _, err := agentInfo(long); err != nil {
		t.Fatalf("connection from before the rotation: %v", err)
	}
	// The expiry gauge follows the served certificate.
	_, body := httpGet(t, "http://"+a.httpAddr+"/metrics")
	if !strings.Contains(body, "pillar_agent_tls_certificate_expiry_timestamp_seconds ") {
		t.Errorf("no certificate expiry gauge in:\n%s", body)
	}
}

func TestTLSRotationBySecretVolume(t *testing.T) {
	srvCA, cliCA := testpki.NewCA(t, "agent servers"), testpki.NewCA(t, "controllers")
	first := srvCA.Server(t, "agent")
	vol := testpki.NewSecretVolume(t, t.TempDir(), first, cliCA.CertPEM)
	o := testOptions()
	f := vol.Files()
	o.TLS.CertFile, o.TLS.KeyFile, o.TLS.CAFile = f.Cert, f.Key, f.CA
	a := start(t, o, newFake())
	client := cliCA.Client(t, "pillar-controller").TLS(t)
	roots := srvCA.Pool()
	if got := servedSerial(t, a.grpcAddr, roots, client); got != first.Cert.SerialNumber.String() {
		t.Fatalf("served %s, want %s", got, first.Cert.SerialNumber)
	}
	second := srvCA.Server(t, "agent")
	vol.Swap(t, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM, "ca.crt": cliCA.CertPEM})
	if got := servedSerial(t, a.grpcAddr, roots, client); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after the ..data swap the agent presented %s, want %s", got, second.Cert.SerialNumber)
	}
}

func TestBadTLSMaterialStopsStartup(t *testing.T) {
	s := newTLSSetup(t)
	expired := s.srvCA.Issue(t, "agent", true, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	other := s.srvCA.Server(t, "agent")
	cases := map[string]struct {
		setup func(o *Options)
		want  string
	}{
		"unreadable cert": {func(o *Options) { o.TLS.CertFile = s.files.Dir + "/missing.crt" }, "missing.crt: no such file"},
		"cert not PEM":    {func(o *Options) { testpki.WriteAtomic(t, o.TLS.CertFile, []byte("hello")) }, "no PEM CERTIFICATE"},
		"key mismatch": {func(o *Options) {
			testpki.WriteAtomic(t, o.TLS.KeyFile, other.KeyPEM)
		}, "private key does not match public key"},
		"CA without certs": {func(o *Options) { testpki.WriteAtomic(t, o.TLS.CAFile, other.KeyPEM) }, "holds no certificates"},
		"expired cert": {func(o *Options) {
			testpki.WriteAtomic(t, o.TLS.CertFile, expired.CertPEM)
			testpki.WriteAtomic(t, o.TLS.KeyFile, expired.KeyPEM)
		}, "expired at"},
		"only two of three files": {func(o *Options) { o.TLS.CAFile = "" }, "-tls-ca-file missing"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := newTLSSetup(t)
			o := s.options()
			tc.setup(&o)
			built := false
			err := run(context.Background(), o, func(Options, *slog.Logger) (service, error) {
				built = true
				return newFake(), nil
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error containing %q", err, tc.want)
			}
			if built {
				t.Fatal("the service was built (and the fencing store locked) despite bad TLS material")
			}
		})
	}
}

func TestMetricsAndHTTPEndpoints(t *testing.T) {
	a := start(t, testOptions(), newFake())
	cc := dial(t, a.grpcAddr, nil)
	for range 2 {
		if _, err := agentInfo(cc); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := agentv1.NewAgentServiceClient(cc).CreateVolume(ctx, &agentv1.CreateVolumeRequest{VolumeId: "pvc-1"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("CreateVolume = %v, want FAILED_PRECONDITION from the fake", err)
	}

	code, body := httpGet(t, "http://"+a.httpAddr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	const svc = `service="pillar.agent.v1.AgentService"`
	for _, line := range []string{
		`pillar_agent_rpc_duration_seconds_count{code="OK",method="GetAgentInfo",` + svc + `} 2`,
		`pillar_agent_rpc_duration_seconds_count{code="FailedPrecondition",method="CreateVolume",` + svc + `} 1`,
		`pillar_agent_rpc_errors_total{code="FailedPrecondition",method="CreateVolume",` + svc + `} 1`,
		`pillar_agent_volumes 5`,
		`pillar_agent_exports 3`,
		`pillar_agent_exports_restored_total 7`,
		`pillar_agent_ready 1`,
		`pillar_agent_build_info{node="storage-1",version="v0.0.0-test"} 1`,
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, "\n"+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if strings.Contains(body, "pillar_agent_tls_certificate_expiry") {
		t.Error("certificate expiry exported without TLS")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
	if code, _ := httpGet(t, "http://"+a.httpAddr+"/healthz"); code != 200 {
		t.Errorf("/healthz: HTTP %d", code)
	}
	if code, _ := httpGet(t, "http://"+a.httpAddr+"/readyz"); code != 200 {
		t.Errorf("/readyz: HTTP %d", code)
	}

	// One record per call; the mutation carries its volume ID at info.
	logs := a.logs.String()
	var rec string
	for l := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(l, `"method":"/pillar.agent.v1.AgentService/CreateVolume"`) {
			rec = l
		}
	}
	for _, want := range []string{`"level":"INFO"`, `"msg":"rpc"`, `"code":"FailedPrecondition"`, `"volume_id":"pvc-1"`, `"error":"stale generation"`, `"duration_seconds":`, `"peer":"127.0.0.1:`} {
		if !strings.Contains(rec, want) {
			t.Errorf("CreateVolume log record %q lacks %s", rec, want)
		}
	}
	if !strings.Contains(logs, `"level":"DEBUG","msg":"rpc","method":"/pillar.agent.v1.AgentService/GetAgentInfo"`) {
		t.Errorf("GetAgentInfo not logged at debug:\n%s", logs)
	}
}

func TestMetricsOff(t *testing.T) {
	o := testOptions()
	o.MetricsAddress = ""
	a := start(t, o, newFake())
	if a.httpAddr != "" {
		t.Fatalf("HTTP server on %s with -metrics-address empty", a.httpAddr)
	}
	if _, err := agentInfo(dial(t, a.grpcAddr, nil)); err != nil {
		t.Fatal(err)
	}
}

func TestHealthFollowsReady(t *testing.T) {
	svc := newFake()
	svc.setReady(errors.New("nvmet configfs /sys/kernel/config/nvmet/subsystems is missing"))
	a := start(t, testOptions(), svc)
	cc := dial(t, a.grpcAddr, nil)
	status := func(want healthpb.HealthCheckResponse_ServingStatus) func() bool {
		return func() bool {
			st1, err1 := healthCheck(cc, "")
			st2, err2 := healthCheck(cc, "pillar.agent.v1.AgentService")
			return err1 == nil && err2 == nil && st1 == want && st2 == want
		}
	}
	// Not ready from the very first call: the first check runs before
	// the server accepts connections.
	if !status(healthpb.HealthCheckResponse_NOT_SERVING)() {
		t.Fatal("health is not NOT_SERVING at start while Ready fails")
	}
	code, body := httpGet(t, "http://"+a.httpAddr+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "nvmet configfs") {
		t.Fatalf("/readyz = %d %q, want 503 with the reason", code, body)
	}
	if code, _ := httpGet(t, "http://"+a.httpAddr+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d while unready, want 200 (liveness is not readiness)", code)
	}
	svc.setReady(nil)
	eventually(t, "SERVING after Ready recovers", status(healthpb.HealthCheckResponse_SERVING))
	svc.setReady(errors.New("fencing directory is not writable"))
	eventually(t, "NOT_SERVING after Ready fails", status(healthpb.HealthCheckResponse_NOT_SERVING))
}

func TestGracefulShutdown(t *testing.T) {
	svc := newFake()
	a := start(t, testOptions(), svc)
	cc := dial(t, a.grpcAddr, nil)

	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch, err := healthpb.NewHealthClient(cc).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch status = %v, %v", r, err)
	}

	inflight := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := agentv1.NewAgentServiceClient(cc).CreateVolume(ctx, &agentv1.CreateVolumeRequest{VolumeId: "slow"})
		inflight <- err
	}()
	<-svc.started

	a.cancel()
	// Clients watching health learn of the shutdown at once.
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch status during shutdown = %v, %v; want NOT_SERVING", r, err)
	}
	code, _ := httpGet(t, "http://"+a.httpAddr+"/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz during shutdown = %d, want 503", code)
	}
	select {
	case err := <-a.done:
		t.Fatalf("Run returned (%v) while a call was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	if svc.closed.Load() != 0 {
		t.Fatal("service closed while a call was in flight")
	}
	// No new call is admitted while the started one finishes.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = agentv1.NewAgentServiceClient(dial(t, a.grpcAddr, nil)).CreateVolume(ctx, &agentv1.CreateVolumeRequest{VolumeId: "slow"})
	cancel()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a new call during shutdown: %v, want UNAVAILABLE", err)
	}
	wcancel() // a Watch never ends by itself; the client ends it
	close(svc.release)
	if err := <-inflight; err != nil {
		t.Fatalf("in-flight call: %v, want it to complete", err)
	}
	select {
	case err := <-a.done:
		a.done <- err
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the in-flight call completed")
	}
	if n := svc.closed.Load(); n != 1 {
		t.Fatalf("Close called %d times, want 1", n)
	}
}

// TestDriftIsChecked: the agent asks its service to put back removed
// exports every -drift-interval, and never with 0.
func TestDriftIsChecked(t *testing.T) {
	o := testOptions()
	o.DriftInterval = 10 * time.Millisecond
	svc := newFake()
	start(t, o, svc)
	eventually(t, "two drift checks", func() bool { return svc.driftChecks.Load() >= 2 })

	o.DriftInterval = 0
	off := newFake()
	a := start(t, o, off)
	time.Sleep(100 * time.Millisecond)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := off.driftChecks.Load(); n != 0 {
		t.Errorf("%d drift checks with -drift-interval=0", n)
	}
}

// TestShutdownEndsHealthWatches: a controller's health Watch, which never
// ends by itself, is told NOT_SERVING and then ended, so an idle agent
// stops at once instead of waiting out its grace period.
func TestShutdownEndsHealthWatches(t *testing.T) {
	o := testOptions()
	o.ShutdownGracePeriod = time.Minute
	a := start(t, o, newFake())
	watch, err := healthpb.NewHealthClient(dial(t, a.grpcAddr, nil)).Watch(context.Background(),
		&healthpb.HealthCheckRequest{Service: agentv1.AgentService_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch status = %v, %v", r, err)
	}
	began := time.Now()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("an idle agent with a health watcher took %v to stop (grace %v)", took, o.ShutdownGracePeriod)
	}
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("watch status at shutdown = %v, %v; want NOT_SERVING", r, err)
	}
	if _, err := watch.Recv(); err == nil {
		t.Error("the watch went on after the agent stopped")
	}
}

func TestGracePeriodCutsLongCalls(t *testing.T) {
	svc := newFake()
	o := testOptions()
	o.ShutdownGracePeriod = 200 * time.Millisecond
	a := start(t, o, svc)
	cc := dial(t, a.grpcAddr, nil)
	inflight := make(chan error, 1)
	go func() {
		_, err := agentv1.NewAgentServiceClient(cc).CreateVolume(context.Background(), &agentv1.CreateVolumeRequest{VolumeId: "slow"})
		inflight <- err
	}()
	<-svc.started
	began := time.Now()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if took := time.Since(began); took < o.ShutdownGracePeriod {
		t.Fatalf("Run returned after %v, before the %v grace period", took, o.ShutdownGracePeriod)
	}
	if err := <-inflight; status.Code(err) == codes.OK {
		t.Fatal("a call still running after the grace period completed")
	}
	if n := svc.closed.Load(); n != 1 {
		t.Fatalf("Close called %d times, want 1", n)
	}
}

func TestStartupFailures(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	built := 0
	newSvc := func(Options, *slog.Logger) (service, error) { built++; return newFake(), nil }

	o := testOptions()
	o.LogOutput = io.Discard
	o.ListenAddress = busy.Addr().String()
	if err := run(context.Background(), o, newSvc); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run on a busy gRPC port = %v", err)
	}
	o = testOptions()
	o.LogOutput = io.Discard
	o.MetricsAddress = busy.Addr().String()
	if err := run(context.Background(), o, newSvc); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("Run on a busy metrics port = %v", err)
	}
	if built != 0 {
		t.Fatalf("the service was built %d times before the ports were bound", built)
	}

	o = testOptions()
	o.LogOutput = io.Discard
	want := errors.New("fencing marks in /x: locked by another agent")
	err = run(context.Background(), o, func(Options, *slog.Logger) (service, error) { return nil, want })
	if !errors.Is(err, want) {
		t.Fatalf("Run with a failing service = %v, want it wrapped", err)
	}

	o = testOptions()
	o.NodeName = ""
	if err := run(context.Background(), o, newSvc); err == nil || !strings.Contains(err.Error(), "-node-name") {
		t.Fatalf("Run without a node name = %v", err)
	}
}

// TestPanicIsAnsweredInternal: a handler that panics answers INTERNAL, is
// logged with its stack and counted, and the agent goes on serving.
func TestPanicIsAnsweredInternal(t *testing.T) {
	a := start(t, testOptions(), newFake())
	cc := dial(t, a.grpcAddr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 2 {
		_, err := agentv1.NewAgentServiceClient(cc).CreateVolume(ctx, &agentv1.CreateVolumeRequest{VolumeId: "panic"})
		if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "CreateVolume") {
			t.Fatalf("CreateVolume of a panicking handler = %v, want INTERNAL naming the method", err)
		}
	}
	if info, err := agentInfo(cc); err != nil || info.GetNodeName() != "storage-1" {
		t.Fatalf("after the panics GetAgentInfo = %v, %v", info, err)
	}
	_, body := httpGet(t, "http://"+a.httpAddr+"/metrics")
	for _, line := range []string{
		`pillar_agent_rpc_panics_total{method="CreateVolume",service="pillar.agent.v1.AgentService"} 2`,
		`pillar_agent_rpc_errors_total{code="Internal",method="CreateVolume",service="pillar.agent.v1.AgentService"} 2`,
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	logs := a.logs.String()
	for _, want := range []string{"handler panicked", "fake handler bug", "run_test.go", `"volume_id":"panic"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("Run returned %v", err)
	}
}
