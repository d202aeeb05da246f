// Command pillar-node is pillar-csi's CSI Node plugin, run by a DaemonSet
// on every worker (hostNetwork, privileged, with /dev, /sys, kubelet's
// directories and /var/lib/pillar-csi/node mounted from the host).
//
// It registers itself with kubelet (package registration; no
// node-driver-registrar sidecar) and serves its own /healthz and /readyz
// (no livenessprobe sidecar).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pillar-csi/pillar-csi/api/flagalias"
	"github.com/pillar-csi/pillar-csi/api/logging"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
	"github.com/pillar-csi/pillar-csi/csidriver/endpoint"
	"github.com/pillar-csi/pillar-csi/csidriver/identity"
	"github.com/pillar-csi/pillar-csi/csidriver/node"
	"github.com/pillar-csi/pillar-csi/csidriver/registration"
)

// defaultHealthAddress is where /healthz and /readyz listen (the node's
// address: pillar-node runs with hostNetwork).
const defaultHealthAddress = ":9441"

type config struct {
	endpoint    string
	nodeName    string
	stateDir    string
	kubeletDir  string // staging and target paths must be under it
	hostNQNFile string
	hostIDFile  string
	// kubeletRegistrationPath is the CSI socket as kubelet sees it on the
	// host; pluginRegistrationDir is kubelet's plugins_registry as
	// mounted here ("" turns registration off).
	kubeletRegistrationPath string
	pluginRegistrationDir   string
	healthAddress           string // "" or "0" turns it off
	logLevel                slog.Level
	logFormat               string
	version                 bool
}

//go:generate env PILLAR_UPDATE_REFERENCE=1 go test -count=1 -run ^TestFlagReference$ .

// registerFlags registers pillar-node's flags on fs, writing to c. The
// names are the ones every pillar-csi binary uses for the same setting;
// -endpoint is the old name of -csi-endpoint, kept for one release.
func registerFlags(fs *flag.FlagSet, c *config) {
	c.endpoint = "unix:///csi/csi.sock"
	c.logLevel, c.logFormat = slog.LevelInfo, logging.FormatJSON
	fs.StringVar(&c.endpoint, "csi-endpoint", c.endpoint, "CSI endpoint (unix:///path or tcp://host:port)")
	flagalias.Add(fs, "endpoint", "csi-endpoint")
	fs.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"), "Kubernetes node name of this worker (default $NODE_NAME)")
	fs.StringVar(&c.stateDir, "state-dir", node.DefaultStateDir, "directory of the stage records (a hostPath)")
	fs.StringVar(&c.kubeletDir, "kubelet-dir", node.DefaultKubeletDir, "kubelet's root directory as mounted here; staging and target paths outside it are refused")
	fs.StringVar(&c.hostNQNFile, "host-nqn-file", node.DefaultHostNQNFile, "file holding this host's NVMe host NQN")
	fs.StringVar(&c.hostIDFile, "host-id-file", node.DefaultHostIDFile, "file holding this host's NVMe host ID (optional)")
	fs.StringVar(&c.kubeletRegistrationPath, "kubelet-registration-path", "", "CSI socket path as kubelet sees it on the host, e.g. /var/lib/kubelet/plugins/pillar-csi.io/csi.sock (required when registration is on)")
	fs.StringVar(&c.pluginRegistrationDir, "plugin-registration-dir", registration.DefaultDir, `kubelet's plugin registration directory, where the registration socket is created ("" turns registration off)`)
	fs.StringVar(&c.healthAddress, "health-address", defaultHealthAddress, `listen address of /healthz and /readyz ("" or "0" disables)`)
	logging.AddFlags(fs, &c.logLevel, &c.logFormat)
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
}

func main() {
	var c config
	registerFlags(flag.CommandLine, &c)
	flag.Parse()
	if c.version {
		fmt.Println(driver.Name, driver.Version)
		return
	}
	log, err := logging.New(os.Stderr, c.logLevel, c.logFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pillar-node:", err)
		os.Exit(2)
	}
	flagalias.Warn(flag.CommandLine, log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("pillar-node failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.nodeName == "" {
		return errors.New("node name is empty: set -node-name or $NODE_NAME (the downward API's spec.nodeName)")
	}
	var reg *registration.Registrar
	if c.pluginRegistrationDir != "" {
		if !strings.HasPrefix(c.endpoint, "unix:") {
			return fmt.Errorf("endpoint %q: kubelet reaches a registered CSI plugin only over a unix socket (or set -plugin-registration-dir= to turn registration off)", c.endpoint)
		}
		var err error
		if reg, err = registration.New(registration.Config{Dir: c.pluginRegistrationDir, Endpoint: c.kubeletRegistrationPath, Logger: log}); err != nil {
			return err
		}
	}
	hostNQN, hostID, err := node.ReadHostIdentity(c.hostNQNFile, c.hostIDFile)
	if err != nil {
		return err
	}
	ns, err := node.New(node.Config{
		NodeName:   c.nodeName,
		HostNQN:    hostNQN,
		HostID:     hostID,
		StateDir:   c.stateDir,
		KubeletDir: c.kubeletDir,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	id := identity.New(ns.Ready, false)
	var hl net.Listener
	if c.healthAddress != "" && c.healthAddress != "0" {
		if hl, err = net.Listen("tcp", c.healthAddress); err != nil {
			return fmt.Errorf("health address %q: %w", c.healthAddress, err)
		}
		defer hl.Close()
	}
	l, err := endpoint.Listen(c.endpoint)
	if err != nil {
		return err
	}
	g := endpoint.New(endpoint.Services{Identity: id, Node: ns}, log)
	log.Info("serving", "endpoint", c.endpoint, "node_id", ns.NodeID(), "version", driver.Version)

	csiCtx, stopCSI := context.WithCancel(context.Background())
	defer stopCSI()
	csiDone := make(chan error, 1)
	// Long enough for a mkfs in flight to finish; kubelet's default grace
	// period is 30 s.
	go func() { csiDone <- endpoint.Serve(csiCtx, g, l, 25*time.Second) }()

	// Registration starts once the CSI endpoint listens: kubelet calls
	// NodeGetInfo on it as soon as it has read the registration.
	regCtx, stopReg := context.WithCancel(context.Background())
	defer stopReg()
	regDone := make(chan error, 1)
	h := &health{identity: id}
	if reg != nil {
		h.serving, h.registered = reg.Serving, reg.Registered
		go func() { regDone <- reg.Run(regCtx) }()
	}
	var hs *http.Server
	healthDone := make(chan error, 1)
	if hl != nil {
		hs = newHealthServer(h.handler())
		log.Info("serving health", "address", hl.Addr().String())
		go func() { healthDone <- hs.Serve(hl) }()
	}

	var failed error
	csiStopped, regStopped := false, reg == nil
	select {
	case <-ctx.Done():
	case err := <-csiDone:
		csiStopped, failed = true, fmt.Errorf("CSI endpoint stopped: %w", orStopped(err))
	case err := <-regDone:
		regStopped, failed = true, orStopped(err)
	case err := <-healthDone:
		failed = fmt.Errorf("health endpoint stopped: %w", orStopped(err))
	}
	// Registration goes first, so kubelet sends no new calls; then the
	// CSI endpoint lets its calls in flight finish; health goes last.
	if !regStopped {
		stopReg()
		<-regDone
	}
	if !csiStopped {
		stopCSI()
		<-csiDone
	}
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}
	return failed
}

// orStopped turns the nil a server returns when it stops on its own into
// an error.
func orStopped(err error) error {
	if err == nil {
		return errors.New("stopped")
	}
	return err
}
