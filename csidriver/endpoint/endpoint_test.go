package endpoint

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestListenRejectsBadEndpoints(t *testing.T) {
	for _, ep := range []string{"", "csi.sock", "unix://relative", "http://x", "unix:"} {
		if l, err := Listen(ep); err == nil {
			l.Close()
			t.Errorf("Listen(%q) accepted", ep)
		}
	}
}

// A crashed plugin's socket is replaced; a live one, or a file that is not
// a socket, is left alone with an error.
func TestListenReplacesOnlyAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	ep := "unix://" + sock

	live, err := Listen(ep)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(ep); err == nil || !strings.Contains(err.Error(), "another process is serving") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Listen over a live socket: %v, want 'another process is serving'", err)
	}
	// Crash: the socket file stays, nobody accepts on it.
	live.(*net.UnixListener).SetUnlinkOnClose(false)
	live.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the stale socket file is gone before the test: %v", err)
	}
	l, err := Listen(ep)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()

	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen("unix://" + file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Listen over a regular file: %v, want 'not a socket'", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("Listen removed a regular file: %v", err)
	}
}

// nodeStub answers NodeStageVolume with a fixed error.
type nodeStub struct {
	csi.UnimplementedNodeServer
	err error
}

func (n nodeStub) NodeStageVolume(context.Context, *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	return &csi.NodeStageVolumeResponse{}, n.err
}

func TestServeLogsCallsWithVolumeIDAndStopsOnCancel(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	// A stale socket file from a crashed plugin is replaced.
	l, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = Listen("unix://" + sock)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	var logs bytes.Buffer
	g := New(Services{Node: nodeStub{err: status.Error(codes.Aborted, "busy")}}, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, g, l, time.Second) }()

	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = csi.NewNodeClient(cc).NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: "pvc-1", Secrets: map[string]string{"password": "hunter2"},
	})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("NodeStageVolume = %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	out := logs.String()
	for _, want := range []string{"method=/csi.v1.Node/NodeStageVolume", "volume_id=pvc-1", "code=Aborted"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("log carries a secret: %q", out)
	}
}
