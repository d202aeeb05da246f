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

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/pillar-csi/pillar-csi/api/flagalias"
	"github.com/pillar-csi/pillar-csi/api/logging"
	"github.com/pillar-csi/pillar-csi/csidriver/controllerapp"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
)

// flags are the command line of pillar-controller: the options of
// controllerapp and what main itself needs.
type flags struct {
	o         controllerapp.Options
	secretNS  string
	logLevel  slog.Level
	logFormat string
	version   bool
}

//go:generate env PILLAR_UPDATE_REFERENCE=1 go test -count=1 -run ^TestFlagReference$ .

// registerFlags registers pillar-controller's flags on fs, with the
// options' defaults. The names are the ones every pillar-csi binary uses
// for the same setting; -graceful-shutdown is the old name of
// -shutdown-grace-period, kept for one release.
func registerFlags(fs *flag.FlagSet) *flags {
	f := &flags{o: controllerapp.DefaultOptions(), logLevel: slog.LevelInfo, logFormat: logging.FormatJSON}
	o := &f.o
	fs.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the controller, where its leader-election Lease lives (default $POD_NAMESPACE)")
	fs.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "elect a leader among the replicas (only the leader acts)")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "name of the leader-election Lease")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "how long a follower waits before it takes over a Lease that is not renewed")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "how long the leader tries to renew before it gives up and exits")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "interval between leader-election attempts")
	fs.StringVar(&f.secretNS, "tls-secret-namespaces", os.Getenv("POD_NAMESPACE"), `comma-separated namespaces of the agents' TLS Secrets, the only ones whose Secrets are read (default $POD_NAMESPACE; empty: none, no agent can use TLS; "*": every namespace, which needs a ClusterRole to read Secrets)`)
	fs.StringVar(&o.CSIEndpoint, "csi-endpoint", "unix:///csi/csi.sock", `CSI endpoint of the Identity and Controller services (unix:///path or tcp://host:port; "" serves none)`)
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, `listen address of /metrics ("0" disables)`)
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, `listen address of /healthz and /readyz ("0" disables)`)
	fs.DurationVar(&o.AgentCallTimeout, "agent-call-timeout", o.AgentCallTimeout, "deadline of each agent call made without one of its own (0: the default, 30s); the calls made for a CSI call keep the CO's deadline (the sidecars' --timeout)")
	fs.StringVar(&o.AgentTokenFile, "agent-token-file", "", "`file` holding the installation's agent token, sent with every agent call and re-read as it rotates (the chart mounts the agent-token Secret's \"token\" key); empty sends none, which only agents with mutual TLS and no -token-dir accept")
	fs.DurationVar(&o.AgentRefresh, "agent-refresh", o.AgentRefresh, "how often a ready agent is asked again for its version and capabilities")
	fs.DurationVar(&o.StoreRefresh, "store-refresh", o.StoreRefresh, "how often a store's capacity is read again")
	fs.DurationVar(&o.GracefulShutdown, "shutdown-grace-period", o.GracefulShutdown, "how long running reconciles may finish after SIGTERM")
	flagalias.Add(fs, "graceful-shutdown", "shutdown-grace-period")
	logging.AddFlags(fs, &f.logLevel, &f.logFormat)
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	return f
}

func main() {
	f := registerFlags(flag.CommandLine)
	flag.Parse()
	if f.version {
		fmt.Println(driver.Name, driver.Version)
		return
	}
	o := f.o
	for n := range strings.SplitSeq(f.secretNS, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.TLSSecretNamespaces = append(o.TLSSecretNamespaces, n)
		}
	}
	o.Version = driver.Version
	log, err := logging.New(os.Stderr, f.logLevel, f.logFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pillar-controller:", err)
		os.Exit(2)
	}
	o.Logger = log
	flagalias.Warn(flag.CommandLine, log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		o.Logger.Error("pillar-controller failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o controllerapp.Options) error {
	cfg, err := kubeConfig()
	if err != nil {
		return err
	}
	o.Logger.Info("starting", "version", driver.Version, "namespace", o.Namespace, "leader_election", o.LeaderElection)
	return controllerapp.Run(ctx, cfg, o)
}

// kubeConfig is pillar-controller's API client configuration: the
// in-cluster one (or --kubeconfig, $KUBECONFIG), with no client-side rate
// limiter (controller-runtime turns client-go's off and leaves the pace
// to the API server's priority and fairness), so that a burst of claims
// never waits on one of its own.
func kubeConfig() (*rest.Config, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}
