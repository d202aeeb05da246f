package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"

	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

// dialFrom connects to addr from the loopback address local (any of
// 127.0.0.0/8 is this host on Linux).
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c: a read sees EOF
// (or a reset) instead of timing out.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestLimitListener: an address over its limit, and any address over the
// total, is closed at once; a closed connection frees its slot; refusals
// are logged at most once per interval.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	ln := newLimitListener(raw, 2, 3, slog.New(slog.NewJSONHandler(logs, nil)))
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	addr := raw.Addr().String()
	accept := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not accepted", what)
			return nil
		}
	}
	a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	s1 := accept("first of 127.0.0.1")
	accept("second of 127.0.0.1")
	if c := dialFrom(t, "127.0.0.1", addr); !closedByServer(c) {
		t.Error("a third connection of 127.0.0.1 was kept")
	}
	dialFrom(t, "127.0.0.2", addr)
	accept("first of 127.0.0.2")
	if c := dialFrom(t, "127.0.0.3", addr); !closedByServer(c) {
		t.Error("a connection over the total was kept")
	}
	if closedByServer(a1) || closedByServer(a2) {
		t.Error("a connection within the limit was closed")
	}
	s1.Close()
	s1.Close() // the slot is given back once
	dialFrom(t, "127.0.0.1", addr)
	accept("127.0.0.1 after one of its connections closed")
	if c := dialFrom(t, "127.0.0.4", addr); !closedByServer(c) {
		t.Error("a second Close gave back a second slot")
	}
	if n := strings.Count(logs.String(), "connection refused: too many open"); n != 1 {
		t.Errorf("%d log lines for 3 refusals within %v, want 1:\n%s", n, refusalLogInterval, logs)
	}
}

// TestServerLimits: the running agent closes an address's connection over
// maxConnsPerHost, and refuses a request over agentv1.MaxMessageSize
// before any handler sees it.
func TestServerLimits(t *testing.T) {
	a := start(t, testOptions(), newFake())
	for i := range maxConnsPerHost {
		if c := dialFrom(t, "127.0.0.1", a.grpcAddr); closedByServer(c) {
			t.Fatalf("connection %d of %d was closed", i+1, maxConnsPerHost)
		}
	}
	if c := dialFrom(t, "127.0.0.1", a.grpcAddr); !closedByServer(c) {
		t.Errorf("connection %d of one address was kept", maxConnsPerHost+1)
	}

	cc, err := grpc.NewClient(a.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}}
			return d.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := agentv1.NewAgentServiceClient(cc)
	reconcile := func(bytes int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Reconcile(ctx, &agentv1.ReconcileRequest{Exports: []*agentv1.DesiredExport{{VolumeId: strings.Repeat("x", bytes)}}})
		return err
	}
	// The fake has no Reconcile: a request within the limit reaches it.
	if err := reconcile(1 << 20); status.Code(err) != codes.Unimplemented {
		t.Errorf("1 MiB request: %v, want UNIMPLEMENTED from the service", err)
	}
	if err := reconcile(agentv1.MaxMessageSize); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("request over %d bytes: %v, want RESOURCE_EXHAUSTED", agentv1.MaxMessageSize, err)
	}
}
