package controllerapp_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/csidriver/controllerapp"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/envtestsuite"

	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

// The tests of this package run pillar-controller against a real
// kube-apiserver and etcd (envtest), with the CRDs of api/config/crd, as a
// user that holds only the generated RBAC of config/rbac (a missing verb
// fails a test), talking gRPC to in-process agents (package fakeagent).
//
// PILLAR_TEST_KUBE_APISERVER names another kube-apiserver binary, e.g. the
// oldest supported one (`make tools` builds bin/kube-apiserver-floor), to
// run the same suite against it.

const (
	namespace = envtestsuite.Namespace
	leaseID   = "pillar-controller-test"
)

var (
	cluster    *envtestsuite.Cluster
	admin      client.Client
	kubeconfig string // of the controller's user, for the binary
	serverVer  int    // the API server's minor version
	logs       = &syncbuf.Buffer{}

	// The in-process controller of most tests.
	stopApp    context.CancelFunc
	appDone    chan error
	metricsURL string
	restarts   = &restartLog{}
	csiSocket  = filepath.Join(os.TempDir(), fmt.Sprintf("pillar-controller-test-%d.sock", os.Getpid()))
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	cluster, err = envtestsuite.Start(filepath.Join("..", "..", "api", "config", "crd"), filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		// Fail, never skip: a suite that silently does not run proves
		// nothing.
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer cluster.Stop()
	admin, kubeconfig, serverVer = cluster.Admin, cluster.Kubeconfig, cluster.Minor
	fmt.Fprintf(os.Stderr, "kube-apiserver %s\n", cluster.Version)
	if err := startApp(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: pillar-controller:", err)
		return 1
	}
	code := m.Run()
	stopApp()
	<-appDone
	if code != 0 {
		fmt.Fprintf(os.Stderr, "---- pillar-controller log ----\n%s", logs.String())
	}
	return code
}

// testOptions are the controller's options in these tests: short lease
// and refresh intervals so that failures and recoveries show in seconds.
func testOptions(metricsAddr string) controllerapp.Options {
	o := controllerapp.DefaultOptions()
	o.Namespace = namespace
	// Secrets are read in the controller's namespace only, where the
	// generated Role grants them.
	o.TLSSecretNamespaces = []string{namespace}
	o.LeaderElectionID = leaseID
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	o.MetricsAddress, o.HealthAddress = metricsAddr, "0"
	o.AgentRefresh, o.StoreRefresh = 2*time.Second, time.Second
	o.AgentCallTimeout = 3 * time.Second
	o.GracefulShutdown = 5 * time.Second
	o.Version = "v0.0.0-test"
	o.OnAgentRestart = restarts.add
	o.CSIEndpoint = "unix://" + csiSocket
	o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return o
}

func startApp() error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	app, err := controllerapp.New(cluster.User, testOptions(addr), nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopApp, appDone, metricsURL = cancel, make(chan error, 1), "http://"+addr+"/metrics"
	go func() { appDone <- app.Manager.Start(ctx) }()
	select {
	case <-app.Manager.Elected():
		return nil
	case err := <-appDone:
		return fmt.Errorf("manager stopped: %v", err)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("not elected within 60s")
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// restartLog records OnAgentRestart calls.
type restartLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *restartLog) add(agent string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[agent]++
}

func (r *restartLog) count(agent string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[agent]
}
