package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestRunRefusesMissingIdentity(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	for _, tc := range []struct {
		c    config
		want string
	}{
		{config{hostNQNFile: filepath.Join(dir, "hostnqn")}, "node name is empty"},
		{config{nodeName: "worker-1", hostNQNFile: filepath.Join(dir, "hostnqn"), hostIDFile: filepath.Join(dir, "hostid")}, "nvme gen-hostnqn"},
	} {
		err := run(context.Background(), tc.c, log)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%+v) = %v, want an error mentioning %q", tc.c, err, tc.want)
		}
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	dir := t.TempDir()
	nqnFile := filepath.Join(dir, "hostnqn")
	if err := os.WriteFile(nqnFile, []byte("nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "csi.sock")
	c := config{endpoint: "unix://" + sock, nodeName: "worker-1", stateDir: filepath.Join(dir, "state"), hostNQNFile: nqnFile, hostIDFile: filepath.Join(dir, "hostid")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	info, err := csi.NewNodeClient(cc).NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || !strings.HasPrefix(info.GetNodeId(), "worker-1/nqn.2014-08.org.nvmexpress:uuid:") {
		t.Fatalf("NodeGetInfo = %v, %v", info, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
}
