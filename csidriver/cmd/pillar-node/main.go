// Command pillar-node is pillar-csi's CSI Node plugin, run by a DaemonSet
// on every worker (hostNetwork, privileged, with /dev, /sys, kubelet's
// directories and /var/lib/pillar-csi/node mounted from the host).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pillar-csi/pillar-csi/csidriver/driver"
	"github.com/pillar-csi/pillar-csi/csidriver/identity"
	"github.com/pillar-csi/pillar-csi/csidriver/node"
	"github.com/pillar-csi/pillar-csi/csidriver/server"
)

type config struct {
	endpoint    string
	nodeName    string
	stateDir    string
	hostNQNFile string
	hostIDFile  string
	logLevel    slog.Level
	version     bool
}

func main() {
	var c config
	flag.StringVar(&c.endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix:///path or tcp://host:port)")
	flag.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"), "Kubernetes node name of this worker (default $NODE_NAME)")
	flag.StringVar(&c.stateDir, "state-dir", node.DefaultStateDir, "directory of the stage records (a hostPath)")
	flag.StringVar(&c.hostNQNFile, "host-nqn-file", node.DefaultHostNQNFile, "file holding this host's NVMe host NQN")
	flag.StringVar(&c.hostIDFile, "host-id-file", node.DefaultHostIDFile, "file holding this host's NVMe host ID (optional)")
	flag.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	flag.BoolVar(&c.version, "version", false, "print the version and exit")
	flag.Parse()
	if c.version {
		fmt.Println(driver.Name, driver.Version)
		return
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: c.logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("pillar-node failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.nodeName == "" {
		return errors.New("node name is empty: set --node-name or $NODE_NAME (the downward API's spec.nodeName)")
	}
	hostNQN, hostID, err := node.ReadHostIdentity(c.hostNQNFile, c.hostIDFile)
	if err != nil {
		return err
	}
	ns, err := node.New(node.Config{
		NodeName: c.nodeName,
		HostNQN:  hostNQN,
		HostID:   hostID,
		StateDir: c.stateDir,
		Logger:   log,
	})
	if err != nil {
		return err
	}
	l, err := server.Listen(c.endpoint)
	if err != nil {
		return err
	}
	g := server.New(server.Services{Identity: identity.New(ns.Ready, false), Node: ns}, log)
	log.Info("serving", "endpoint", c.endpoint, "node_id", ns.NodeID(), "version", driver.Version)
	// Long enough for a mkfs in flight to finish; kubelet's default grace
	// period is 30 s.
	return server.Serve(ctx, g, l, 25*time.Second)
}
