// Command agent-probe calls pillar-agent's API the way a stranger would:
// from wherever it runs (a pod, a node), with the token it is given or
// none, and prints the gRPC status of each call, one line each:
//
//	ListExports <code>
//	CreateVolume <code>
//	DeleteVolume <code>
//
// It is the attacker of tests/e2e/pillar's TestAgentRefusesStrangers, run
// in an ordinary pod (from the repository's bin/, built static so that any
// image can run it) and on the node, and of TestGeneratedMutualTLS, which
// gives it a CA (-ca) and a client certificate (-cert, -key) to speak TLS
// with. -calls limits the calls to some of the three. It exits 0 whatever
// the codes are; 2 on a bad flag.
//
// With -connect it opens TCP connections instead, to each address of a
// comma-separated list, and prints one line for each: "connect <addr> ok",
// "refused", "timeout" or "error" (the error on standard error). It is
// the tenant's pod of TestTenantEgressPolicy, which a NetworkPolicy keeps
// off the storage nodes' ports.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"
)

func main() {
	addr := flag.String("addr", "", "the agent's host:port")
	token := flag.String("token", "", "a token to send (none if empty)")
	pool := flag.String("zfs-pool", "tank", "the ZFS pool CreateVolume asks for")
	volume := flag.String("volume", "pvc-agent-probe", "the volume ID CreateVolume and DeleteVolume name")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of each call")
	caFile := flag.String("ca", "", "PEM file of the CA the agent's certificate must chain to: speak TLS (plaintext if empty)")
	certFile := flag.String("cert", "", "PEM file of a client certificate to present, with -key")
	keyFile := flag.String("key", "", "PEM file of the client certificate's key")
	serverName := flag.String("server-name", "", "the name the agent's certificate must carry (default: -addr's host)")
	calls := flag.String("calls", "ListExports,CreateVolume,DeleteVolume", "comma-separated calls to make, in this order")
	connect := flag.String("connect", "", "comma-separated host:port list to open TCP connections to, instead of calling the agent")
	flag.Parse()
	if *connect != "" {
		for _, a := range strings.Split(*connect, ",") {
			fmt.Printf("connect %s %s\n", a, dial(a, *timeout))
		}
		return
	}
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "agent-probe: -addr is required")
		os.Exit(2)
	}
	creds := insecure.NewCredentials()
	if *caFile != "" {
		cfg, err := clientTLS(*caFile, *certFile, *keyFile, *serverName)
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent-probe:", err)
			os.Exit(2)
		}
		creds = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if *token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(agentauth.Bearer(*token)))
	}
	cc, err := grpc.NewClient(*addr, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-probe:", err)
		os.Exit(2)
	}
	defer cc.Close()
	c := agentv1.NewAgentServiceClient(cc)
	tok := &agentv1.FencingToken{LifecycleUid: "6d3c1f0e-5b7a-4c2e-9f4d-000000000001", PublicationGeneration: 1}
	store := &agentv1.Store{Name: "zfs", Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: *pool, ParentDataset: "pillar", Sparse: true}}}
	for _, call := range []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"ListExports", func(ctx context.Context) error {
			_, err := c.ListExports(ctx, &agentv1.ListExportsRequest{})
			return err
		}},
		{"CreateVolume", func(ctx context.Context) error {
			_, err := c.CreateVolume(ctx, &agentv1.CreateVolumeRequest{FencingToken: tok, VolumeId: *volume, Store: store, CapacityBytes: 16 << 20})
			return err
		}},
		{"DeleteVolume", func(ctx context.Context) error {
			_, err := c.DeleteVolume(ctx, &agentv1.DeleteVolumeRequest{FencingToken: tok, VolumeId: *volume, Store: store})
			return err
		}},
	} {
		if !slices.Contains(strings.Split(*calls, ","), call.name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		err := call.do(ctx)
		cancel()
		fmt.Printf("%s %s\n", call.name, status.Code(err))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", call.name, err)
		}
	}
}

// dial opens a TCP connection to addr and closes it, and says how that
// went: ok, refused (the address answered with a reset), timeout (nothing
// answered, as when a packet filter drops the connection) or error.
func dial(addr string, timeout time.Duration) string {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	switch {
	case err == nil:
		conn.Close()
		return "ok"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	fmt.Fprintf(os.Stderr, "connect %s: %v\n", addr, err)
	return "error"
}

// clientTLS is the TLS configuration of the -ca, -cert, -key and
// -server-name flags.
func clientTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: serverName}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
