// Package controllerapp runs pillar-controller: a controller-runtime
// manager, leader-elected on a Lease, with the reconcilers of the Pillar*
// configuration CRDs (package reconcile), the CSI Identity and Controller
// services (package controller) on a CSI endpoint, health and readiness
// endpoints, and one /metrics for controller-runtime's metrics and
// pillar's own.
//
// Health: /healthz (liveness) and /readyz (readiness) on
// Options.HealthAddress. With a CSI endpoint, both call the Identity
// service's Probe through that endpoint, as the livenessprobe sidecar
// would: a replica whose CSI server stopped answering, or whose Probe says
// not ready, is restarted (liveness) or taken out of its Service
// (readiness). Probe is ready once the caches have synced, on followers
// too, so a follower stays ready. /readyz also checks the caches itself,
// for a replica that serves no CSI endpoint.
//
// Leadership: only the replica holding the Lease reconciles and talks to
// agents; the others keep their caches warm and wait. A leader that cannot
// renew its Lease within the renew deadline stops at once (no graceful
// shutdown) and Run returns an error, so the process exits and restarts as
// a follower. On SIGTERM the leader finishes what is running for up to
// Options.GracefulShutdown and then releases the Lease, so a successor takes
// over without waiting for it to expire.
package controllerapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/pillar-csi/pillar-csi/api/agentauth"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
	"github.com/pillar-csi/pillar-csi/csidriver/endpoint"
	"github.com/pillar-csi/pillar-csi/csidriver/identity"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// Defaults of Options.
const (
	DefaultLeaderElectionID = "pillar-controller.pillar-csi.io"
	DefaultMetricsAddress   = ":9430"
	DefaultHealthAddress    = ":9431"
	DefaultLeaseDuration    = 15 * time.Second
	DefaultRenewDeadline    = 10 * time.Second
	DefaultRetryPeriod      = 2 * time.Second
	DefaultGracefulShutdown = 25 * time.Second
)

// Options configure pillar-controller.
type Options struct {
	// Namespace is where the controller runs: the Lease lives there. The
	// Helm chart sets it from the downward API ($POD_NAMESPACE).
	Namespace string
	// LeaderElection is on in every real deployment; off only for a single
	// replica under test.
	LeaderElection   bool
	LeaderElectionID string
	LeaseDuration    time.Duration
	RenewDeadline    time.Duration
	RetryPeriod      time.Duration
	// TLSSecretNamespaces are the namespaces whose Secrets the controller
	// reads for agent TLS (and watches for rotation). Empty: none, so no
	// Secret is read or watched and no agent can use TLS; "*": every
	// namespace (which needs a ClusterRole to read Secrets).
	TLSSecretNamespaces []string
	// MetricsAddress and HealthAddress are listen addresses; "0" turns
	// the endpoint off.
	MetricsAddress string
	HealthAddress  string
	// AgentCallTimeout bounds every agent call made without a deadline of
	// its own (those of CSI calls keep the CO's); agentclient's default
	// if zero.
	AgentCallTimeout time.Duration
	// AgentTokenFile holds the installation's agent token, sent with
	// every agent call (agentauth.ClientToken; re-read as it rotates).
	// Empty sends none: only agents with mutual TLS and no -token-dir
	// then answer.
	AgentTokenFile string
	// AgentRefresh and StoreRefresh: see reconcile.Options.
	AgentRefresh time.Duration
	StoreRefresh time.Duration
	// GracefulShutdown bounds the wait for running reconciles on SIGTERM.
	GracefulShutdown time.Duration
	// OnAgentRestart is called with an agent's name when a new agent
	// instance is seen (reconcile.AgentReconciler.OnRestart).
	OnAgentRestart func(agent string)
	// Version is reported in pillar_controller_build_info.
	Version string
	// Logger receives every log line (controller-runtime's and
	// client-go's too); slog.Default() if nil.
	Logger *slog.Logger
	// AbandonAfter is how long a volume whose CreateVolume never completed
	// may wait for its claim, and a snapshot whose CreateSnapshot never
	// completed for its VolumeSnapshotContent, before it is rolled back;
	// controller.DefaultAbandonAfter if zero.
	AbandonAfter time.Duration
	// CSIEndpoint is where the CSI Identity and Controller services are
	// served (unix:///path or tcp://host:port); empty serves none. Every
	// replica serves them, leader or not: the CSI sidecars elect their own
	// leader, and the fencing tokens keep two serving replicas safe.
	CSIEndpoint string
}

// DefaultOptions are the options pillar-controller starts with.
func DefaultOptions() Options {
	return Options{
		LeaderElection:   true,
		LeaderElectionID: DefaultLeaderElectionID,
		LeaseDuration:    DefaultLeaseDuration,
		RenewDeadline:    DefaultRenewDeadline,
		RetryPeriod:      DefaultRetryPeriod,
		MetricsAddress:   DefaultMetricsAddress,
		HealthAddress:    DefaultHealthAddress,
		GracefulShutdown: DefaultGracefulShutdown,
		AgentRefresh:     reconcile.DefaultAgentRefresh,
		StoreRefresh:     reconcile.DefaultStoreRefresh,
	}
}

// App is a configured, not yet started pillar-controller.
type App struct {
	Manager     manager.Manager
	Controllers *reconcile.Controllers
}

// New builds the manager and registers the reconcilers. metricsReg is where
// pillar's metrics go: controller-runtime's metrics.Registry in
// pillar-controller (nil selects it); tests pass their own so that two
// managers in one process do not collide.
func New(cfg *rest.Config, opts Options, metricsReg prometheus.Registerer) (*App, error) {
	if opts.LeaderElection && opts.Namespace == "" {
		return nil, errors.New("leader election needs the controller's namespace: set -namespace or $POD_NAMESPACE")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var token credentials.PerRPCCredentials
	if opts.AgentTokenFile != "" {
		t, err := agentauth.NewClientToken(opts.AgentTokenFile)
		if err != nil {
			return nil, fmt.Errorf("-agent-token-file: %w", err)
		}
		token = t
	}
	lr := logr.FromSlogHandler(log.Handler())
	ctrl.SetLogger(lr)
	klog.SetLogger(lr)

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cacheOpts := cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
	if len(opts.TLSSecretNamespaces) > 0 && !slices.Contains(opts.TLSSecretNamespaces, "*") {
		ns := map[string]cache.Config{}
		for _, n := range opts.TLSSecretNamespaces {
			ns[n] = cache.Config{}
		}
		cacheOpts.ByObject = map[client.Object]cache.ByObject{&corev1.Secret{}: {Namespaces: ns}}
	}
	leaseDuration, renewDeadline, retryPeriod := opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod
	graceful := opts.GracefulShutdown
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        lr,
		Cache:                         cacheOpts,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		GracefulShutdownTimeout:       &graceful,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsAddress},
		HealthProbeBindAddress:        opts.HealthAddress,
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	if metricsReg == nil {
		metricsReg = metrics.Registry
	}
	m, err := reconcile.NewMetrics(metricsReg, opts.Version)
	if err != nil {
		return nil, err
	}
	push := newPusher(log)
	ctrls, err := reconcile.Setup(mgr, reconcile.Options{
		AgentRefresh:     opts.AgentRefresh,
		StoreRefresh:     opts.StoreRefresh,
		SecretNamespaces: opts.TLSSecretNamespaces,
		OnAgentRestart: func(agent string) {
			push.notify(agent)
			if opts.OnAgentRestart != nil {
				opts.OnAgentRestart(agent)
			}
		},
		Metrics: m,
		Pool: agentclient.Options{
			CallTimeout: opts.AgentCallTimeout,
			Logger:      log,
			Credentials: token,
		},
	})
	if err != nil {
		return nil, err
	}
	synced := &atomic.Bool{}
	if err := mgr.Add(&cacheWatcher{cache: mgr.GetCache(), synced: synced}); err != nil {
		return nil, err
	}
	cachesSynced := func(context.Context) error {
		if !synced.Load() {
			return errors.New("caches are not synced yet")
		}
		return nil
	}
	cm, err := controller.NewMetrics(metricsReg, mgr.GetClient())
	if err != nil {
		return nil, err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.PersistentVolume{}, controller.IndexVolumeHandle, controller.VolumeHandles); err != nil {
		return nil, err
	}
	svc := controller.New(controller.Config{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), PersistentVolumes: mgr.GetClient(), Connector: ctrls.Connector,
		StoreChanged: ctrls.StoreChanged, Metrics: cm, Recorder: mgr.GetEventRecorder("pillar-controller"), Logger: log})
	push.svc, push.client, push.recorder = svc, mgr.GetClient(), mgr.GetEventRecorder("pillar-controller")
	if err := (&controller.VolumeStateReconciler{Service: svc, Recorder: mgr.GetEventRecorder("pillar-controller"),
		AbandonAfter: opts.AbandonAfter}).Setup(mgr); err != nil {
		return nil, err
	}
	if err := (&controller.SnapshotStateReconciler{Service: svc, Recorder: mgr.GetEventRecorder("pillar-controller"),
		AbandonAfter: opts.AbandonAfter}).Setup(mgr); err != nil {
		return nil, err
	}
	if err := mgr.Add(push); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("caches", func(r *http.Request) error { return cachesSynced(r.Context()) }); err != nil {
		return nil, err
	}
	if opts.CSIEndpoint != "" {
		cs := &csiServer{endpoint: opts.CSIEndpoint, grace: graceful, log: log, metrics: cm,
			services: endpoint.Services{Identity: identity.New(cachesSynced, true), Controller: svc}}
		if err := mgr.Add(cs); err != nil {
			return nil, err
		}
		// The HTTP answer withholds the reason; the log says it.
		probe := func(r *http.Request) error {
			err := cs.probe(r.Context())
			if err != nil {
				log.Warn("health check failed", "check", "csi", "path", r.URL.Path, "error", err)
			}
			return err
		}
		if err := mgr.AddHealthzCheck("csi", probe); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("csi", probe); err != nil {
			return nil, err
		}
	}
	return &App{Manager: mgr, Controllers: ctrls}, nil
}

// The Lease of leader election, and the core/v1 Events client-go's leader
// election records about it, are the controller's only namespaced
// objects.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=pillar-csi,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=pillar-csi,resources=events,verbs=create;patch

// Run starts pillar-controller and blocks until ctx ends (nil error) or
// the manager fails, including a lost Lease ("leader election lost").
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	app, err := New(cfg, opts, nil)
	if err != nil {
		return err
	}
	return app.Manager.Start(ctx)
}

// cacheWatcher marks the caches synced; it runs on every replica, leader
// or not, so a follower is ready to take over.
type cacheWatcher struct {
	cache  cache.Cache
	synced *atomic.Bool
}

func (w *cacheWatcher) Start(ctx context.Context) error {
	if w.cache.WaitForCacheSync(ctx) {
		w.synced.Store(true)
	}
	<-ctx.Done()
	return nil
}

func (w *cacheWatcher) NeedLeaderElection() bool { return false }

// csiServer serves the CSI services on every replica.
type csiServer struct {
	endpoint string
	grace    time.Duration
	log      *slog.Logger
	services endpoint.Services
	metrics  *controller.Metrics
	target   atomic.Pointer[string] // gRPC target of the listener, once it listens
}

// csiProbeTimeout bounds the health checks' Probe call; the chart's
// probes need timeoutSeconds above it (they allow 10 s). A Probe of the
// process's own socket that takes seconds means a starved CPU, which a
// restart does not cure.
const csiProbeTimeout = 8 * time.Second

func (c *csiServer) Start(ctx context.Context) error {
	l, err := endpoint.Listen(c.endpoint)
	if err != nil {
		return err
	}
	target := "passthrough:///" + l.Addr().String()
	if l.Addr().Network() == "unix" {
		target = "unix://" + l.Addr().String()
	}
	c.target.Store(&target)
	c.log.Info("serving CSI", "endpoint", c.endpoint)
	return endpoint.Serve(ctx, endpoint.New(c.services, c.log, c.metrics.Interceptor()), l, c.grace)
}

func (c *csiServer) NeedLeaderElection() bool { return false }

// probe calls the Identity service's Probe through the served endpoint,
// on a connection of its own: it fails when the server does not answer
// as well as when Probe says not ready.
func (c *csiServer) probe(ctx context.Context) error {
	target := c.target.Load()
	if target == nil {
		return fmt.Errorf("CSI endpoint %s is not listening yet", c.endpoint)
	}
	cc, err := grpc.NewClient(*target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("CSI endpoint %s: %w", c.endpoint, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, csiProbeTimeout)
	defer cancel()
	resp, err := csi.NewIdentityClient(cc).Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return fmt.Errorf("CSI Probe on %s: %s: %s", c.endpoint, status.Code(err), status.Convert(err).Message())
	}
	if r := resp.GetReady(); r != nil && !r.GetValue() {
		return fmt.Errorf("CSI Probe on %s: not ready", c.endpoint)
	}
	return nil
}
