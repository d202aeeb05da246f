package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
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
	// The socket file appears at bind(2), a moment before listen(2): a
	// call that fails fast on "connection refused" races the server.
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	info, err := csi.NewNodeClient(cc).NodeGetInfo(cctx, &csi.NodeGetInfoRequest{}, grpc.WaitForReady(true))
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

func TestRunRefusesBadRegistrationAndHealthFlags(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	nqnFile := writeHostNQN(t, dir)
	base := config{endpoint: "unix://" + filepath.Join(dir, "csi.sock"), nodeName: "worker-1", stateDir: filepath.Join(dir, "state"),
		hostNQNFile: nqnFile, hostIDFile: filepath.Join(dir, "hostid"), pluginRegistrationDir: dir,
		kubeletRegistrationPath: "/var/lib/kubelet/plugins/pillar-csi.io/csi.sock"}
	for _, tc := range []struct {
		edit func(*config)
		want string
	}{
		{func(c *config) { c.kubeletRegistrationPath = "" }, "-kubelet-registration-path"},
		{func(c *config) { c.kubeletRegistrationPath = "unix:///var/lib/kubelet/plugins/pillar-csi.io/csi.sock" }, "without a scheme"},
		{func(c *config) { c.kubeletRegistrationPath = "plugins/pillar-csi.io/csi.sock" }, "absolute path"},
		{func(c *config) { c.endpoint = "tcp://127.0.0.1:0" }, "only over a unix socket"},
		{func(c *config) { c.pluginRegistrationDir = filepath.Join(dir, "missing") }, "plugins_registry mounted"},
		{func(c *config) { c.healthAddress = "127.0.0.1:http-nonsense" }, "health address"},
		{func(c *config) { c.kubeletDir = "var/lib/kubelet" }, "kubelet directory"},
	} {
		c := base
		tc.edit(&c)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, c, log)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%+v) = %v, want an error mentioning %q", c, err, tc.want)
		}
	}
}

func writeHostNQN(t *testing.T, dir string) string {
	t.Helper()
	f := filepath.Join(dir, "hostnqn")
	if err := os.WriteFile(f, []byte("nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// unixConn dials a socket by its plain path, as kubelet does both the
// registration socket and the endpoint it was given. Its calls wait for
// the connection (up to their deadline): a socket file exists from
// bind(2) on, a moment before the server listens.
func unixConn(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///kubelet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRunRegistersWithKubelet plays kubelet against pillar-node: it finds
// the registration socket, reads the plugin info, calls NodeGetInfo on
// the endpoint it was given (as its CSI handler does) and confirms the
// registration; /healthz follows the Identity Probe and /readyz adds the
// registration. Shutdown removes the registration socket.
func TestRunRegistersWithKubelet(t *testing.T) {
	dir := t.TempDir()
	regDir := filepath.Join(dir, "plugins_registry")
	if err := os.Mkdir(regDir, 0o755); err != nil {
		t.Fatal(err)
	}
	csiSock := filepath.Join(dir, "csi.sock")
	regSock := filepath.Join(regDir, "pillar-csi.io-reg.sock")
	haddr := freeAddr(t)
	c := config{endpoint: "unix://" + csiSock, nodeName: "worker-1", stateDir: filepath.Join(dir, "state"),
		hostNQNFile: writeHostNQN(t, dir), hostIDFile: filepath.Join(dir, "hostid"),
		pluginRegistrationDir: regDir, kubeletRegistrationPath: csiSock, healthAddress: haddr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(regSock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no registration socket")
		}
		time.Sleep(10 * time.Millisecond)
	}

	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	reg := registerapi.NewRegistrationClient(unixConn(t, regSock))
	info, err := reg.GetInfo(cctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "pillar-csi.io" || info.Endpoint != csiSock || strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Fatalf("GetInfo = %+v", info)
	}
	csiConn := unixConn(t, info.Endpoint)
	ni, err := csi.NewNodeClient(csiConn).NodeGetInfo(cctx, &csi.NodeGetInfoRequest{})
	if err != nil || !strings.HasPrefix(ni.GetNodeId(), "worker-1/nqn.2014-08.org.nvmexpress:uuid:") {
		t.Fatalf("NodeGetInfo on the registered endpoint = %v, %v", ni, err)
	}

	// What /healthz must say: what the Identity Probe says on this host.
	wantCode, wantBody := http.StatusOK, "ok"
	if _, err := csi.NewIdentityClient(csiConn).Probe(cctx, &csi.ProbeRequest{}); err != nil {
		wantCode, wantBody = http.StatusServiceUnavailable, status.Convert(err).Message()
	}
	healthz, readyz := "http://"+haddr+"/healthz", "http://"+haddr+"/readyz"
	expect(t, healthz, wantCode, wantBody)
	if wantCode == http.StatusOK {
		expect(t, readyz, http.StatusServiceUnavailable, "not registered with kubelet")
	} else {
		expect(t, readyz, http.StatusServiceUnavailable, wantBody)
	}
	if _, err := reg.NotifyRegistrationStatus(cctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	expect(t, readyz, wantCode, wantBody)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	if _, err := os.Lstat(regSock); !os.IsNotExist(err) {
		t.Errorf("registration socket after shutdown: %v", err)
	}
}
