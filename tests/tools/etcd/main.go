// Command etcd is a minimal single-member etcd server for test control
// planes (controller-runtime's envtest and the API-server suites). It wraps
// go.etcd.io/etcd/server/v3/embed and accepts exactly the flags envtest
// passes, spelled with two dashes as the real etcd prints them, because
// envtest decides whether to pass --unsafe-no-fsync by matching the
// "--help" output.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "directory for the member's data (required)")
	listenClient := fs.String("listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve clients on")
	advertiseClient := fs.String("advertise-client-urls", "", "comma-separated client URLs to advertise (default: the listen URLs)")
	listenPeer := fs.String("listen-peer-urls", "http://127.0.0.1:0", "comma-separated URLs to serve peers on")
	noFsync := fs.Bool("unsafe-no-fsync", false, "skip fsync; data may be lost on a crash (tests only)")
	startTimeout := fs.Duration("start-timeout", time.Minute, "how long to wait for the server to become ready")
	fs.SetOutput(os.Stdout)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: etcd [flags]")
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(fs.Output(), "  --%s\n\t%s", f.Name, f.Usage)
			if f.DefValue != "" {
				fmt.Fprintf(fs.Output(), " (default %s)", f.DefValue)
			}
			fmt.Fprintln(fs.Output())
		})
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *dataDir == "" {
		return errors.New("--data-dir is required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.UnsafeNoFsync = *noFsync
	cfg.LogLevel = "warn"
	var err error
	if cfg.ListenClientUrls, err = parseURLs(*listenClient); err != nil {
		return fmt.Errorf("--listen-client-urls: %w", err)
	}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	if *advertiseClient != "" {
		if cfg.AdvertiseClientUrls, err = parseURLs(*advertiseClient); err != nil {
			return fmt.Errorf("--advertise-client-urls: %w", err)
		}
	}
	if cfg.ListenPeerUrls, err = parseURLs(*listenPeer); err != nil {
		return fmt.Errorf("--listen-peer-urls: %w", err)
	}
	// A single member never talks to peers; advertise the listen address so
	// the initial cluster string is self-consistent.
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting: %w", err)
	}
	defer e.Close()

	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(*startTimeout):
		e.Server.Stop()
		return fmt.Errorf("not ready after %s", *startTimeout)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
		return nil
	case err := <-e.Err():
		return err
	}
}

func parseURLs(s string) ([]url.URL, error) {
	var urls []url.URL
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		urls = append(urls, *u)
	}
	return urls, nil
}
