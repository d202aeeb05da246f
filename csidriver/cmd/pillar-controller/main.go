// Command pillar-controller is pillar-csi's controller, run by a
// leader-elected Deployment: it reconciles the Pillar* configuration CRDs
// (agents, stores, protocols, generated StorageClasses) and serves the CSI
// Controller service.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/pillar-csi/pillar-csi/csidriver/controllerapp"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
)

func main() {
	o := controllerapp.DefaultOptions()
	var (
		secretNS string
		logLevel slog.Level
		version  bool
	)
	flag.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the controller, where its leader-election Lease lives (default $POD_NAMESPACE)")
	flag.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "elect a leader among the replicas (only the leader acts)")
	flag.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "name of the leader-election Lease")
	flag.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "how long a follower waits before it takes over a Lease that is not renewed")
	flag.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "how long the leader tries to renew before it gives up and exits")
	flag.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "interval between leader-election attempts")
	flag.StringVar(&secretNS, "tls-secret-namespaces", os.Getenv("POD_NAMESPACE"), "comma-separated namespaces of the agents' TLS Secrets (default $POD_NAMESPACE; empty: every namespace)")
	flag.StringVar(&o.CSIEndpoint, "csi-endpoint", "unix:///csi/csi.sock", `CSI endpoint of the Identity and Controller services (unix:///path or tcp://host:port; "" serves none)`)
	flag.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, `listen address of /metrics ("0" disables)`)
	flag.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, `listen address of /healthz and /readyz ("0" disables)`)
	flag.DurationVar(&o.AgentCallTimeout, "agent-call-timeout", o.AgentCallTimeout, "deadline of each agent call made without one of its own (0: the default, 30s); the calls made for a CSI call keep the CO's deadline (the sidecars' --timeout)")
	flag.DurationVar(&o.AgentRefresh, "agent-refresh", o.AgentRefresh, "how often a ready agent is asked again for its version and capabilities")
	flag.DurationVar(&o.StoreRefresh, "store-refresh", o.StoreRefresh, "how often a store's capacity is read again")
	flag.DurationVar(&o.GracefulShutdown, "graceful-shutdown", o.GracefulShutdown, "how long running reconciles may finish after SIGTERM")
	flag.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	flag.BoolVar(&version, "version", false, "print the version and exit")
	flag.Parse()
	if version {
		fmt.Println(driver.Name, driver.Version)
		return
	}
	for n := range strings.SplitSeq(secretNS, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.TLSSecretNamespaces = append(o.TLSSecretNamespaces, n)
		}
	}
	o.Version = driver.Version
	o.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		o.Logger.Error("pillar-controller failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o controllerapp.Options) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	o.Logger.Info("starting", "version", driver.Version, "namespace", o.Namespace, "leader_election", o.LeaderElection)
	return controllerapp.Run(ctx, cfg, o)
}
