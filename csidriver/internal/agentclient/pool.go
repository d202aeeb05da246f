// Package agentclient is pillar-controller's side of the agent gRPC API: one
// connection per PillarAgent, reused by every reconciler and by the CSI
// Controller service, with a deadline on every call, client keepalives and
// a gRPC health watch, so a lost agent is noticed within seconds when its
// process ends and within about 30 s when its node goes silent.
//
// A connection is keyed by the agent's name and is replaced (never patched)
// when its target changes: a new address or new TLS material (a rotated
// Secret) takes effect on the next Get, without a restart. Calls still
// running on the old connection end with CANCELED; callers retry them, and
// the fencing tokens they carry make a retry safe.
package agentclient

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// Defaults of Options.
const (
	// DefaultCallTimeout bounds a call whose context has no deadline.
	// Backend operations on a busy pool take seconds; the agent bounds
	// each tool run itself.
	DefaultCallTimeout = 30 * time.Second

	// keepaliveTime is how long a quiet connection waits before it pings
	// the agent; with keepaliveTimeout a storage node that lost power is
	// noticed within about 30 s. pillar-agent accepts pings every 10 s.
	// A missed answer closes the connection with every call on it, so
	// the timeout is what a busy storage node may stall for without
	// failing the calls in flight: 5 s cut a 100-claim burst's calls on a
	// lab node stalled under it; 20 s is pillar-agent's own timeout for
	// the controller's answers.
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 20 * time.Second

	// maxReconnectDelay caps gRPC's reconnect backoff and the health
	// watch's retry: an agent that comes back is seen within this time.
	maxReconnectDelay = 10 * time.Second
)

// Target is where and how one agent is reached.
type Target struct {
	// Address is host:port.
	Address string
	// TLS is the client's mutual-TLS configuration; nil means plaintext.
	TLS *tls.Config
	// Material identifies the TLS material (a digest of the Secret's
	// keys), so that rotated material replaces the connection. Empty for
	// plaintext.
	Material string
}

// Options configure a Pool.
type Options struct {
	// CallTimeout bounds every call whose context has no deadline of its
	// own; DefaultCallTimeout if zero. A call made for a CSI call carries
	// the CO's deadline (the sidecars' --timeout) and keeps it, longer or
	// not: a call of the agent cut short while it waits its turn there
	// fails a CSI call the CO would have waited for, and the CO's retry
	// backs off further each time.
	CallTimeout time.Duration
	// Notify is called (from a pool goroutine, never under a lock) with
	// the agent's name whenever its health status changes, so a
	// reconciler can look at it again. May be nil.
	Notify func(name string)
	// Logger receives connection events; slog.Default() if nil.
	Logger *slog.Logger
	// Credentials, when not nil, are sent with every call (the
	// installation's agent token, agentauth.ClientToken).
	Credentials credentials.PerRPCCredentials
}

// Pool holds one connection per agent. It is safe for concurrent use.
type Pool struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	conns  map[string]*Conn
	closed bool
}

// NewPool returns an empty pool.
func NewPool(opts Options) *Pool {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Pool{opts: opts, log: log, conns: map[string]*Conn{}}
}

// Get returns the connection to the named agent, dialing it when there is
// none or when t differs from the target of the one there is. Dialing does
// not wait for the agent: the first call (or the health watch) connects.
func (p *Pool) Get(name string, t Target) (*Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPoolClosed
	}
	if c, ok := p.conns[name]; ok {
		if c.target.Address == t.Address && c.target.Material == t.Material && (c.target.TLS == nil) == (t.TLS == nil) {
			return c, nil
		}
		p.log.Info("agent target changed; reconnecting", "agent", name,
			"old_endpoint", c.target.Address, "endpoint", t.Address, "tls", t.TLS != nil)
		delete(p.conns, name)
		c.close()
	}
	c, err := p.dial(name, t)
	if err != nil {
		return nil, err
	}
	p.conns[name] = c
	return c, nil
}

// Forget closes and drops the named agent's connection (the PillarAgent
// was deleted).
func (p *Pool) Forget(name string) {
	p.mu.Lock()
	c, ok := p.conns[name]
	delete(p.conns, name)
	p.mu.Unlock()
	if ok {
		c.close()
	}
}

// Close closes every connection; Get fails afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	conns := p.conns
	p.conns, p.closed = map[string]*Conn{}, true
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

func (p *Pool) dial(name string, t Target) (*Conn, error) {
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if t.TLS != nil {
		creds = credentials.NewTLS(t.TLS)
	}
	bc := backoff.DefaultConfig
	bc.MaxDelay = maxReconnectDelay
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 5 * time.Second}),
		grpc.WithChainUnaryInterceptor(deadline(p.opts.CallTimeout)),
	}
	if p.opts.Credentials != nil {
		dopts = append(dopts, grpc.WithPerRPCCredentials(p.opts.Credentials))
	}
	cc, err := grpc.NewClient("passthrough:///"+t.Address, dopts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		name:   name,
		target: t,
		cc:     cc,
		Agent:  agentv1.NewAgentServiceClient(cc),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go c.watch(ctx, p.opts.Notify, p.log)
	return c, nil
}

// deadline gives every call without a deadline one of d.
func deadline(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// Conn is the connection to one agent.
type Conn struct {
	name   string
	target Target
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}

	// Agent is the agent's API on this connection.
	Agent agentv1.AgentServiceClient

	mu     sync.Mutex
	health Health
}

// Endpoint is the host:port this connection dials.
func (c *Conn) Endpoint() string { return c.target.Address }

// Health is what the health watch last saw.
type Health struct {
	// Known is false until the watch has had a first answer or failure.
	Known bool
	// Serving is true while the agent reports SERVING.
	Serving bool
	// Err is why the watch failed (nil while the agent answers).
	Err error
	// Since is when the status last changed.
	Since time.Time
}

// Health returns the health watch's last observation.
func (c *Conn) Health() Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health
}

func (c *Conn) setHealth(serving bool, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := !c.health.Known || c.health.Serving != serving || (c.health.Err == nil) != (err == nil)
	if changed {
		c.health = Health{Known: true, Serving: serving, Err: err, Since: time.Now()}
	} else {
		c.health.Err = err
	}
	return changed
}

// watch follows the agent's health service until the connection closes.
// A broken stream (agent gone, connection refused, keepalive timeout) is
// retried with backoff up to maxReconnectDelay.
func (c *Conn) watch(ctx context.Context, notify func(string), log *slog.Logger) {
	defer close(c.done)
	hc := healthpb.NewHealthClient(c.cc)
	delay := 500 * time.Millisecond
	report := func(serving bool, err error) {
		if c.setHealth(serving, err) {
			if err != nil {
				log.Warn("agent unreachable", "agent", c.name, "endpoint", c.target.Address, "error", err)
			} else {
				log.Info("agent health", "agent", c.name, "endpoint", c.target.Address, "serving", serving)
			}
			if notify != nil {
				notify(c.name)
			}
		}
	}
	for ctx.Err() == nil {
		stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: agentv1.AgentService_ServiceDesc.ServiceName})
		if err == nil {
			for {
				var resp *healthpb.HealthCheckResponse
				resp, err = stream.Recv()
				if err != nil {
					break
				}
				delay = 500 * time.Millisecond
				report(resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil)
			}
		}
		if ctx.Err() != nil {
			return
		}
		report(false, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxReconnectDelay)
	}
}

func (c *Conn) close() {
	c.cancel()
	<-c.done
	_ = c.cc.Close()
}
