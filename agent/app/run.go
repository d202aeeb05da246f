package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"

	"github.com/pillar-csi/pillar-csi/agent/internal/metrics"
	"github.com/pillar-csi/pillar-csi/agent/server"
	"github.com/pillar-csi/pillar-csi/agent/tlsconfig"
	"github.com/pillar-csi/pillar-csi/api/logging"
)

// service is what Run hosts: the agent's gRPC service (*server.Server in
// pillar-agent; a fake in the tests).
type service interface {
	// Register registers the service's gRPC services on g.
	Register(g grpc.ServiceRegistrar)
	// Ready reports nil when the service can serve.
	Ready(ctx context.Context) error
	// Stats reports the counts behind the volume and export gauges; it
	// must be cheap, it is called at every scrape.
	Stats() server.Stats
	// Close releases what the service holds (the fencing store's lock).
	Close() error
	// RestoreDrift puts back the exports something else removed, and
	// says how many (server.Server.RestoreDrift).
	RestoreDrift(ctx context.Context) (int, error)
	// ExportsRestored counts what RestoreDrift put back since the start.
	ExportsRestored() uint64
}

// newServiceFunc builds the service run hosts, after run has checked the
// options, loaded the TLS material and bound its listeners, so a bad flag
// or a busy port never takes the fencing store's lock.
type newServiceFunc func(opts Options, logger *slog.Logger) (service, error)

// newServer builds pillar-agent's AgentService from the options.
func newServer(opts Options, logger *slog.Logger) (service, error) {
	if opts.HostRoot != "" {
		// Every zfs and lvm command would fail with "not found"; say why
		// once, at start.
		fi, err := os.Stat(opts.HostRoot)
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		if err != nil {
			return nil, fmt.Errorf("-host-root: the host's root filesystem must be mounted at %s: %w", opts.HostRoot, err)
		}
	}
	s, err := server.New(server.Config{
		NodeName:         opts.NodeName,
		Version:          opts.Version,
		GenerationsDir:   opts.GenerationsDir,
		ConfigfsRoot:     opts.ConfigfsRoot,
		Logger:           logger,
		CommandTimeout:   opts.CommandTimeout,
		StoreConcurrency: opts.StoreConcurrency,
		HostRoot:         opts.HostRoot,
		LVMRejectDevices: opts.LVMReject,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Limits of the gRPC server.
const (
	// maxMessageSize bounds a request or response, and so the memory a
	// caller makes the agent hold per call before its token is checked
	// (gRPC decodes a request before the interceptors run). The
	// controller sends a large node's Reconcile in batches below it.
	maxMessageSize = agentv1.MaxMessageSize
	// maxConcurrentStreams bounds the calls in flight on one connection;
	// a client with more waits for a free stream. pillar-controller keeps
	// one connection per agent, and a burst of provisioning runs as many
	// calls as the CSI sidecars' workers (100 by default) on it.
	maxConcurrentStreams = 256
	// connectionTimeout bounds the TLS handshake and HTTP/2 preface of a
	// new connection, so a peer that connects and stalls holds nothing.
	connectionTimeout = 10 * time.Second
	// The agent pings a connection idle for keepaliveTime and drops it if
	// no answer comes within keepaliveTimeout: a controller that vanished
	// (node lost, network partition) does not keep a connection forever.
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
	// Clients may ping at most this often, also without active calls
	// (the controller keeps one long-lived connection per agent); a
	// client that pings faster is sent GOAWAY.
	keepaliveMinClientPing = 10 * time.Second
	// readinessTimeout bounds one Ready call.
	readinessTimeout = 5 * time.Second
	// httpShutdownTimeout bounds the wait for in-flight scrapes.
	httpShutdownTimeout = 5 * time.Second
)

// Run serves the agent until ctx is cancelled, then shuts down gracefully
// and returns nil. It returns an error, without serving, when the options
// are invalid, the TLS material is bad, an address cannot be bound or the
// service cannot be built; and when serving fails.
//
// Shutdown order: the health service turns NOT_SERVING (so clients and
// probes stop sending new work), in-flight calls get the grace period to
// finish (grpc GracefulStop) and are cut after it (Stop), the HTTP server
// stops, and the service is closed, releasing the fencing store.
func Run(ctx context.Context, opts Options) error {
	return run(ctx, opts, newServer)
}

// run is Run with the service's constructor given, so tests can host a
// fake.
func run(ctx context.Context, opts Options, newService newServiceFunc) (err error) {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("pillar-agent: %w", err)
	}
	out := opts.LogOutput
	if out == nil {
		out = os.Stderr
	}
	logger, err := logging.New(out, opts.LogLevel, opts.LogFormat)
	if err != nil {
		return fmt.Errorf("pillar-agent: %w", err)
	}

	var (
		creds  = credentials.TransportCredentials(nil)
		certs  *tlsconfig.Reloader
		notAft func() time.Time
	)
	if opts.TLSEnabled() {
		certs, err = tlsconfig.New(opts.TLS, tlsconfig.Options{Logger: logger.With("component", "tls"), ClientName: opts.TLSClientName})
		if err != nil {
			return fmt.Errorf("pillar-agent: mutual TLS: %w", err)
		}
		creds = credentials.NewTLS(certs.ServerConfig())
		notAft = func() time.Time { return certs.Leaf().NotAfter }
	}

	var auth *authenticator
	if opts.TokenDir != "" {
		tokens, err := agentauth.NewAccepted(opts.TokenDir)
		if err != nil {
			return fmt.Errorf("pillar-agent: -token-dir: %w", err)
		}
		auth = &authenticator{tokens: tokens, logger: logger.With("component", "auth")}
	}

	rawLn, err := net.Listen("tcp", opts.ListenAddress)
	if err != nil {
		return fmt.Errorf("pillar-agent: gRPC: %w", err)
	}
	grpcLn := newLimitListener(rawLn, maxConnsPerHost, maxConns, logger.With("component", "listener"))
	defer grpcLn.Close()
	var httpLn net.Listener
	if opts.MetricsAddress != "" {
		if httpLn, err = net.Listen("tcp", opts.MetricsAddress); err != nil {
			return fmt.Errorf("pillar-agent: metrics: %w", err)
		}
		defer httpLn.Close()
	}

	svc, err := newService(opts, logger)
	if err != nil {
		return fmt.Errorf("pillar-agent: %w", err)
	}
	defer func() {
		if cerr := svc.Close(); cerr != nil {
			logger.Error("closing the agent service", "error", cerr)
			if err == nil {
				err = fmt.Errorf("pillar-agent: close: %w", cerr)
			}
		}
	}()

	m := metrics.New(metrics.Config{
		Version: opts.Version, NodeName: opts.NodeName,
		Stats: func() (int, int) {
			st := svc.Stats()
			return st.Volumes, st.Exports
		},
		CertificateNotAfter: notAft,
		ExportsRestored:     svc.ExportsRestored,
	})

	watchesEnd := make(chan struct{})
	gs := newGRPCServer(creds, auth, m, logger, watchesEnd)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	svc.Register(gs)

	rd := &readiness{svc: svc, health: hs, metrics: m, logger: logger}
	// Decide the first status before the first call can arrive.
	rd.check(ctx)

	var hsrv *http.Server
	if httpLn != nil {
		hsrv = newHTTPServer(m, rd, logger)
	}

	logger.Info("pillar-agent serving",
		"version", opts.Version, "node", opts.NodeName,
		"grpc_address", grpcLn.Addr().String(), "metrics_address", addrString(httpLn),
		"tls", opts.TLSEnabled(), "token_dir", opts.TokenDir, "generations_dir", opts.GenerationsDir, "configfs_root", opts.ConfigfsRoot)
	if auth != nil {
		logger.Info("every call but health must carry an accepted token", "tokens", auth.tokens.Count())
	} else if !opts.TLSEnabled() {
		logger.Warn("no token and no mutual TLS (-allow-unauthenticated): any client that can reach the gRPC port may call the agent")
	}
	if opts.listening != nil {
		var ma net.Addr
		if httpLn != nil {
			ma = httpLn.Addr()
		}
		opts.listening(grpcLn.Addr(), ma)
	}

	serveErr := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := gs.Serve(grpcLn); err != nil {
			serveErr <- fmt.Errorf("gRPC: %w", err)
		}
	})
	if hsrv != nil {
		wg.Go(func() {
			if err := hsrv.Serve(httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("metrics: %w", err)
			}
		})
	}
	pollCtx, stopPolling := context.WithCancel(ctx)
	wg.Go(func() { rd.poll(pollCtx, opts.ReadinessInterval) })
	if opts.DriftInterval > 0 {
		wg.Go(func() { watchDrift(pollCtx, svc, opts.DriftInterval, logger) })
	}

	var failed error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "reason", context.Cause(ctx).Error(), "grace_period", opts.ShutdownGracePeriod.String())
	case failed = <-serveErr:
		logger.Error("serving failed; shutting down", "error", failed)
	}

	stopPolling()
	rd.shutdown()
	// Health watchers have been told NOT_SERVING; their streams never
	// end by themselves, and the grace is for calls.
	close(watchesEnd)
	stopGRPC(gs, opts.ShutdownGracePeriod, logger)
	if hsrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		if err := hsrv.Shutdown(sctx); err != nil {
			hsrv.Close()
		}
		cancel()
	}
	wg.Wait()
	if failed != nil {
		return fmt.Errorf("pillar-agent: %w", failed)
	}
	logger.Info("stopped")
	return nil
}

// newGRPCServer applies the agent's limits and interceptors; creds nil
// means plaintext, auth nil accepts calls without a token. Closing
// watchesEnd ends every health Watch stream.
func newGRPCServer(creds credentials.TransportCredentials, auth *authenticator, m *metrics.Metrics, logger *slog.Logger, watchesEnd <-chan struct{}) *grpc.Server {
	// Metrics outermost, so the latency includes the logging and refused
	// calls are counted; the token check next, so a refused call reaches
	// nothing else; recovery innermost, so a panic is logged and counted
	// as the INTERNAL it is answered with.
	unary := []grpc.UnaryServerInterceptor{m.UnaryServerInterceptor()}
	var stream []grpc.StreamServerInterceptor
	if auth != nil {
		unary = append(unary, auth.unary())
		stream = append(stream, auth.stream())
	}
	unary = append(unary, logInterceptor(logger), recoverInterceptor(logger, m))
	stream = append(stream, endWatches(watchesEnd), recoverStreamInterceptor(logger, m))
	gopts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(maxMessageSize),
		grpc.MaxSendMsgSize(maxMessageSize),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.ConnectionTimeout(connectionTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinClientPing, PermitWithoutStream: true}),
	}
	if creds != nil {
		gopts = append(gopts, grpc.Creds(creds))
	}
	return grpc.NewServer(gopts...)
}

// watchDrift runs svc.RestoreDrift every interval until ctx ends. A
// failed check (nvmet not loaded yet) is logged when it starts failing
// and when it recovers, not at every tick.
func watchDrift(ctx context.Context, svc service, interval time.Duration, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, max(interval, 10*time.Second))
		_, err := svc.RestoreDrift(cctx)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			logger.Warn("cannot check the exports in nvmet; retrying", "error", err, "interval", interval.String())
			failing = true
		case err == nil && failing:
			logger.Info("checking the exports in nvmet again")
			failing = false
		}
	}
}

// endWatches ends a health Watch stream once done is closed. Every
// pillar-controller keeps one open on each agent, and GracefulStop waits
// for every stream: without it each shutdown would last the whole grace
// period, although no call was in flight.
func endWatches(done <-chan struct{}) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != healthpb.Health_Watch_FullMethodName {
			return handler(srv, ss)
		}
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		go func() {
			select {
			case <-done:
				cancel()
			case <-ctx.Done():
			}
		}()
		return handler(srv, &streamWithContext{ServerStream: ss, ctx: ctx})
	}
}

type streamWithContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *streamWithContext) Context() context.Context { return s.ctx }

// stopGRPC lets in-flight calls finish for up to grace, then cuts what is
// left. GracefulStop also waits for streams such as a health Watch, which
// never end on their own: the grace period bounds that too.
func stopGRPC(gs *grpc.Server, grace time.Duration, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		logger.Warn("grace period over; cutting the calls still running", "grace_period", grace.String())
		gs.Stop()
		<-done
	}
}

func addrString(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// readiness asks the service whether it is ready and publishes the answer
// to the gRPC health service, /readyz and pillar_agent_ready.
type readiness struct {
	svc     service
	health  *health.Server
	metrics *metrics.Metrics
	logger  *slog.Logger

	mu       sync.Mutex
	err      error // last answer; errShuttingDown after shutdown
	checked  bool
	shutDown bool
}

var errShuttingDown = errors.New("shutting down")

// agentService is the AgentService's name in the health service; "" is the
// server as a whole. Both carry the same status.
var agentService = agentv1.AgentService_ServiceDesc.ServiceName

func (r *readiness) poll(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.check(ctx)
		}
	}
}

func (r *readiness) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, readinessTimeout)
	err := r.svc.Ready(cctx)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: the answer no longer matters
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shutDown {
		return
	}
	changed := !r.checked || (err == nil) != (r.err == nil) || (err != nil && err.Error() != r.err.Error())
	r.err, r.checked = err, true
	st := healthpb.HealthCheckResponse_SERVING
	if err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	r.health.SetServingStatus("", st)
	r.health.SetServingStatus(agentService, st)
	r.metrics.SetReady(err == nil)
	if changed {
		if err != nil {
			r.logger.Warn("not ready", "error", err)
		} else {
			r.logger.Info("ready")
		}
	}
}

func (r *readiness) shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shutDown, r.err = true, errShuttingDown
	// Shutdown sets every service NOT_SERVING and ignores later updates.
	r.health.Shutdown()
	r.metrics.SetReady(false)
}

// ready returns the last answer.
func (r *readiness) ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func newHTTPServer(m *metrics.Metrics, rd *readiness, logger *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	// Liveness: the process answers HTTP. Not tied to readiness, so a node
	// without nvmet loaded is reported unready, not restarted in a loop.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := rd.ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
