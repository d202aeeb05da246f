package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

// harness is a Server on fakes, served over an in-memory gRPC connection
// and called through the generated client, as pillar-controller calls it.
type harness struct {
	t      *testing.T
	srv    *Server
	c      agentv1.AgentServiceClient
	nv     *fakeNvmet
	be     *fakeBackend
	built  int // backends the factory built
	gen    string
	devDir string
	logs   *logBuffer // the server's JSON log records
}

// logBuffer collects the server's log output.
type logBuffer struct{ syncbuf.Buffer }

// records decodes every log record written so far.
func (l *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range bytes.Lines(l.Bytes()) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// newHarness serves a Server over the fakes; each option may change its
// Config first.
func newHarness(t *testing.T, options ...func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, nv: newFakeNvmet(), devDir: t.TempDir(), logs: &logBuffer{}}
	h.be = newFakeBackend(h.devDir)
	h.gen = filepath.Join(t.TempDir(), "generations")
	cfg := Config{
		GenerationsDir: h.gen,
		ConfigfsRoot:   t.TempDir(),
		Logger:         slog.New(slog.NewJSONHandler(h.logs, nil)),
	}
	for _, o := range options {
		o(&cfg)
	}
	srv, err := newServer(cfg, h.nv, func(storeSpec) (backends.Backend, error) { h.built++; return h.be, nil })
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	srv.Register(g)
	go g.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///agent",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h.c = agentv1.NewAgentServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		srv.Close()
	})
	return h
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const uid1, uid2 = "7b0c3c52-4d2e-4c55-9f21-000000000001", "7b0c3c52-4d2e-4c55-9f21-000000000002"

func tok(uid string, gen uint64) *agentv1.FencingToken {
	return &agentv1.FencingToken{LifecycleUid: uid, PublicationGeneration: gen}
}

var lvmStore = &agentv1.Store{Name: "fast", Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{VolumeGroup: "vg0"}}}

func tcp(acl bool) *agentv1.NvmeofTcpExport {
	return &agentv1.NvmeofTcpExport{BindAddress: "192.0.2.10", Port: 4420, AclEnabled: acl}
}

func (h *harness) create(id string, tk *agentv1.FencingToken, size int64) (*agentv1.CreateVolumeResponse, error) {
	return h.c.CreateVolume(ctxT(h.t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore, CapacityBytes: size})
}

// blockedCreate starts a CreateVolume of id (uid1, generation 1) whose
// backend create blocks, and returns once the backend has it: unblock lets
// it finish (at the latest at cleanup, before the harness stops, so a
// failing test cannot hang), done receives the call's error.
func (h *harness) blockedCreate(id string) (unblock func(), done <-chan error) {
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	h.be.blockCh, h.be.enteredCh = block, entered
	unblock = sync.OnceFunc(func() { close(block) })
	h.t.Cleanup(unblock)
	errs := make(chan error, 1)
	go func() { _, err := h.create(id, tok(uid1, 1), 1<<20); errs <- err }()
	<-entered
	return unblock, errs
}

func (h *harness) export(id string, tk *agentv1.FencingToken, acl bool) (*agentv1.ExportVolumeResponse, error) {
	return h.c.ExportVolume(ctxT(h.t), &agentv1.ExportVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore, Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(acl)}})
}

func (h *harness) mustCreateExport(id string, tk *agentv1.FencingToken, acl bool) {
	h.t.Helper()
	if _, err := h.create(id, tk, 1<<20); err != nil {
		h.t.Fatalf("create %s: %v", id, err)
	}
	if _, err := h.export(id, tk, acl); err != nil {
		h.t.Fatalf("export %s: %v", id, err)
	}
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func wantRejection(t *testing.T, what string, err error, want agentv1.FencingRejection_Reason) *agentv1.FencingRejection {
	t.Helper()
	rej, ok := agentv1.FencingRejectionOf(err)
	if !ok {
		t.Errorf("%s: %v, want a fencing rejection %v", what, err, want)
		return nil
	}
	if rej.GetReason() != want {
		t.Errorf("%s: rejection %v, want %v", what, rej.GetReason(), want)
	}
	return rej
}
