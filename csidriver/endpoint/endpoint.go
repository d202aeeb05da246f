// Package endpoint serves pillar-csi's CSI services over gRPC on their CSI
// endpoint, a unix socket (or TCP, for tests), with the interceptor all
// pillar-csi binaries log their calls with (api/logging). Requests are
// never logged in full: CSI secrets travel in them.
//
// It is the transport only; the services are packages identity,
// controller and node. (In the agent module, package server is the
// service and app its transport.)
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/pillar-csi/pillar-csi/api/logging"
)

// Services are the CSI services one binary serves; nil ones are not
// registered.
type Services struct {
	Identity   csi.IdentityServer
	Node       csi.NodeServer
	Controller csi.ControllerServer
}

// Listen parses a CSI endpoint (unix:///csi/csi.sock, unix:/path,
// tcp://127.0.0.1:10000) and listens on it, removing a stale socket
// file first (kubelet's plugin watcher leaves none, but a crashed
// plugin does) — never a socket another process serves on.
func Listen(endpoint string) (net.Listener, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		if p == "" || !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("endpoint %q: want unix:///absolute/path", endpoint)
		}
		if err := RemoveStaleSocket(p); err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
		}
		return net.Listen("unix", p)
	case "tcp":
		return net.Listen("tcp", u.Host)
	}
	return nil, fmt.Errorf("endpoint %q: scheme must be unix or tcp", endpoint)
}

// RemoveStaleSocket removes the unix socket a crashed process left at p,
// so that a new listener can bind there; a missing p is not an error. It
// refuses to remove anything else: a file that is not a socket, or a
// socket another process still serves on (a second pillar-node started by
// mistake must not take the endpoint, or kubelet's registration, from the
// one kubelet talks to).
func RemoveStaleSocket(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; not removing it", p)
	}
	if c, err := net.DialTimeout("unix", p, staleSocketProbe); err == nil {
		c.Close()
		return fmt.Errorf("another process is serving on %s", p)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// staleSocketProbe bounds the connect that tells a live socket from a
// stale one; a stale socket refuses at once (ECONNREFUSED).
const staleSocketProbe = time.Second

// New returns a gRPC server with the services registered and the logging
// interceptor installed, outermost, before the extra interceptors (such
// as a service's metrics).
func New(s Services, log *slog.Logger, extra ...grpc.UnaryServerInterceptor) *grpc.Server {
	if log == nil {
		log = slog.Default()
	}
	// kubelet and the sidecars probe every few seconds; a record for each
	// would bury the calls that change something.
	logCalls := logging.UnaryServerInterceptor(log, csi.Identity_Probe_FullMethodName)
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{logCalls}, extra...)...))
	if s.Identity != nil {
		csi.RegisterIdentityServer(g, s.Identity)
	}
	if s.Node != nil {
		csi.RegisterNodeServer(g, s.Node)
	}
	if s.Controller != nil {
		csi.RegisterControllerServer(g, s.Controller)
	}
	return g
}

// Serve serves on l until ctx ends, then stops gracefully: calls in
// flight finish (a stage half done would otherwise leave work for the
// CO's retry), bounded by grace, after which they are cut off.
func Serve(ctx context.Context, g *grpc.Server, l net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		g.Stop()
	}
	return nil
}
