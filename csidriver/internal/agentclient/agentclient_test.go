package agentclient_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
)

func TestClientTLS(t *testing.T) {
	pki, err := fakeagent.NewPKI("ca")
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := pki.Issue("controller", false, nil, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	expired, expiredKey, err := pki.Issue("controller", false, nil, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := pki.Issue("other", false, nil, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	good := map[string][]byte{"ca.crt": pki.CAPEM, "tls.crt": crt, "tls.key": key}
	with := func(k string, v []byte) map[string][]byte {
		m := map[string][]byte{}
		for kk, vv := range good {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cfg, digest, err := agentclient.ClientTLS(good, "", "10.0.0.7:9420", time.Now())
	if err != nil || cfg.ServerName != "10.0.0.7" || len(cfg.Certificates) != 1 || digest == "" {
		t.Fatalf("good material: %v, %v", cfg, err)
	}
	if cfg2, _, _ := agentclient.ClientTLS(good, "agent.example", "10.0.0.7:9420", time.Now()); cfg2.ServerName != "agent.example" {
		t.Errorf("serverName = %q", cfg2.ServerName)
	}
	if _, d2, _ := agentclient.ClientTLS(with("tls.crt", crt), "", "10.0.0.7:9420", time.Now()); d2 != digest {
		t.Error("the same material must have the same digest")
	}
	rotated, rkey, _ := pki.Issue("controller", false, nil, time.Time{})
	if _, d3, err := agentclient.ClientTLS(map[string][]byte{"ca.crt": pki.CAPEM, "tls.crt": rotated, "tls.key": rkey}, "", "10.0.0.7:9420", time.Now()); err != nil || d3 == digest {
		t.Errorf("rotated material: digest unchanged or %v", err)
	}
	for _, c := range []struct {
		data map[string][]byte
		key  string
		says string
	}{
		{with("ca.crt", nil), "ca.crt", "missing"},
		{with("tls.key", []byte{}), "tls.key", "missing"},
		{with("ca.crt", []byte("not pem")), "ca.crt", "no PEM"},
		{with("tls.key", otherKey), "tls.crt/tls.key", "does not match"},
		{map[string][]byte{"ca.crt": pki.CAPEM, "tls.crt": expired, "tls.key": expiredKey}, "tls.crt", "expired"},
	} {
		_, _, err := agentclient.ClientTLS(c.data, "", "10.0.0.7:9420", time.Now())
		var me *agentclient.MaterialError
		if !errors.As(err, &me) || me.Key != c.key || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ClientTLS(%s) = %v, want a MaterialError for %s saying %q", c.key, err, c.key, c.says)
		}
	}
}

func TestPool(t *testing.T) {
	fa, err := fakeagent.Start(fakeagent.Options{NodeName: "n1", Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Stop()
	notified := make(chan string, 16)
	p := agentclient.NewPool(agentclient.Options{CallTimeout: 2 * time.Second, Notify: func(n string) { notified <- n }})
	defer p.Close()

	c1, err := p.Get("a", agentclient.Target{Address: fa.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := p.Get("a", agentclient.Target{Address: fa.Addr()}); c2 != c1 {
		t.Error("the same target must reuse the connection")
	}
	info, err := c1.Agent.GetAgentInfo(context.Background(), &agentv1.GetAgentInfoRequest{})
	if err != nil || info.GetNodeName() != "n1" {
		t.Fatalf("GetAgentInfo = %v, %v", info, err)
	}
	select {
	case n := <-notified:
		if n != "a" {
			t.Errorf("notified %q", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no health notification")
	}
	if h := c1.Health(); !h.Known || !h.Serving {
		t.Errorf("health = %+v", h)
	}
	fa.Stop()
	select {
	case <-notified:
	case <-time.After(5 * time.Second):
		t.Fatal("a stopped agent was not noticed")
	}
	if h := c1.Health(); h.Serving || h.Err == nil {
		t.Errorf("health after stop = %+v", h)
	}
	// Every call has a deadline, even with a context that has none.
	start := time.Now()
	_, err = c1.Agent.GetCapacity(context.Background(), &agentv1.GetCapacityRequest{}, waitForReady())
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 4*time.Second {
		t.Errorf("call to a stopped agent: %v after %v, want DeadlineExceeded after the 2s call timeout", err, time.Since(start))
	}
	// A call with a deadline of its own (a CSI call's) keeps it, though
	// it is longer than the call timeout.
	own, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	start = time.Now()
	_, err = c1.Agent.GetCapacity(own, &agentv1.GetCapacityRequest{}, waitForReady())
	cancel()
	if took := time.Since(start); status.Code(err) != codes.DeadlineExceeded || took < 2900*time.Millisecond {
		t.Errorf("call to a stopped agent with a 3s deadline: %v after %v, want DeadlineExceeded after 3s", err, took)
	}
	// A new target replaces the connection.
	c3, err := p.Get("a", agentclient.Target{Address: "127.0.0.1:1"})
	if err != nil || c3 == c1 || c3.Endpoint() != "127.0.0.1:1" {
		t.Errorf("new target: %v, %v", c3, err)
	}
	p.Forget("a")
	if c4, _ := p.Get("a", agentclient.Target{Address: "127.0.0.1:1"}); c4 == c3 {
		t.Error("Forget left the connection: Get returned it again")
	}
	p.Close()
	if _, err := p.Get("b", agentclient.Target{Address: fa.Addr()}); err == nil {
		t.Error("Get after Close succeeded")
	}
}

// waitForReady makes the call wait for a connection (instead of failing
// fast), so that only the deadline can end it.
func waitForReady() grpc.CallOption { return grpc.WaitForReady(true) }

type infoOnly struct {
	agentv1.UnimplementedAgentServiceServer
}

func (infoOnly) GetAgentInfo(context.Context, *agentv1.GetAgentInfoRequest) (*agentv1.GetAgentInfoResponse, error) {
	return &agentv1.GetAgentInfoResponse{NodeName: "n1"}, nil
}

// The pool sends its credentials with every call, and an agent that checks
// them (as pillar-agent's -token-dir does) answers only then.
func TestPoolSendsToken(t *testing.T) {
	dir := t.TempDir()
	tok := strings.Repeat("k", 40)
	if err := os.WriteFile(filepath.Join(dir, agentauth.ClientKey), []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	accepted, err := agentauth.NewAccepted(dir)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := accepted.Verify(ctx); err != nil {
			return nil, agentauth.Refusal(err)
		}
		return h(ctx, req)
	}))
	agentv1.RegisterAgentServiceServer(gs, infoOnly{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()

	creds, err := agentauth.NewClientToken(filepath.Join(dir, agentauth.ClientKey))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		creds credentials.PerRPCCredentials
		want  codes.Code
	}{
		{"with the token", creds, codes.OK},
		{"without", nil, codes.Unauthenticated},
	} {
		p := agentclient.NewPool(agentclient.Options{CallTimeout: 5 * time.Second, Credentials: tc.creds})
		c, err := p.Get("a", agentclient.Target{Address: ln.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Agent.GetAgentInfo(context.Background(), &agentv1.GetAgentInfoRequest{})
		if status.Code(err) != tc.want {
			t.Errorf("%s: GetAgentInfo = %v, want %v", tc.name, err, tc.want)
		}
		p.Close()
	}
}

// A storage node that stalls for longer than a keepalive ping's old 5 s
// (busy under a burst) keeps its connection: a missed answer would close
// it with every call in flight. The stall starts before the connection's
// first ping (after 10 s without traffic) and ends 7 s after it.
func TestPoolRidesOutAStall(t *testing.T) {
	t.Parallel()
	fa, err := fakeagent.Start(fakeagent.Options{NodeName: "n1", Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Stop()
	px := startStallProxy(t, fa.Addr())
	notified := make(chan string, 16)
	p := agentclient.NewPool(agentclient.Options{CallTimeout: time.Minute, Notify: func(n string) { notified <- n }})
	defer p.Close()
	c, err := p.Get("a", agentclient.Target{Address: px.addr()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Agent.GetAgentInfo(context.Background(), &agentv1.GetAgentInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-notified:
	case <-time.After(5 * time.Second):
		t.Fatal("no health notification")
	}
	px.stall(true)
	// A call made during the stall waits it out on the same connection.
	done := make(chan error, 1)
	go func() {
		_, err := c.Agent.GetAgentInfo(context.Background(), &agentv1.GetAgentInfoRequest{})
		done <- err
	}()
	time.Sleep(17 * time.Second)
	px.stall(false)
	if err := <-done; err != nil {
		t.Errorf("a call in flight across a 17 s stall: %v", err)
	}
	select {
	case <-notified:
		t.Errorf("health changed across the stall: %+v", c.Health())
	default:
	}
	if n := px.accepted(); n != 1 {
		t.Errorf("%d connections to the agent, want 1: the stall closed the first", n)
	}
}

// stallProxy forwards TCP connections to an agent and, while stalled,
// holds every byte in both directions, as a storage node too busy to
// answer does.
type stallProxy struct {
	ln net.Listener

	mu      sync.Mutex
	cond    *sync.Cond
	stalled bool
	conns   int
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(func() { _ = ln.Close(); p.stall(false) })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns++
			p.mu.Unlock()
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) stall(on bool) {
	p.mu.Lock()
	p.stalled = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *stallProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

func (p *stallProxy) pipe(from, to net.Conn) {
	defer func() { _ = from.Close(); _ = to.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		p.mu.Lock()
		for p.stalled {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
