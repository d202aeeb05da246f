package controllerapp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controllerapp"
)

// The tests of this package run pillar-controller against a real
// kube-apiserver and etcd (envtest), with the CRDs of api/config/crd, as a
// user that holds only the generated RBAC of config/rbac (a missing verb
// fails a test), talking gRPC to in-process agents (package fakeagent).
//
// PILLAR_TEST_KUBE_APISERVER names another kube-apiserver binary, e.g. the
// 1.24 one of `make tools-oldkube`, to run the same suite against it.

const (
	namespace   = "pillar-csi"
	leaseID     = "pillar-controller-test"
	controllerU = "system:serviceaccount:pillar-csi:pillar-controller"
)

var (
	env        *envtest.Environment
	admin      client.Client
	scheme     = runtime.NewScheme()
	userConfig *rest.Config
	kubeconfig string // of the controller's user, for the binary
	serverVer  int    // the API server's minor version
	logs       = &syncBuffer{}

	// The in-process controller of most tests; the leader-election test
	// stops it last.
	stopApp    context.CancelFunc
	appDone    chan error
	metricsURL string
	restarts   = &restartLog{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			// Fail, never skip: a suite that silently does not run proves
			// nothing.
			fmt.Fprintf(os.Stderr, "FAIL: the API-server suite needs kube-apiserver and etcd in $KUBEBUILDER_ASSETS (%q): %v\n"+
				"Run `make tools` at the repository root; `make test` sets KUBEBUILDER_ASSETS.\n", assets, err)
			return 1
		}
	}
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(clientgoscheme.AddToScheme(scheme))
	must(v1alpha1.AddToScheme(scheme))
	env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "api", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	if p := os.Getenv("PILLAR_TEST_KUBE_APISERVER"); p != "" {
		env.ControlPlane.GetAPIServer().Path = p
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting kube-apiserver and etcd: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	cfg.WarningHandler = rest.NoWarnings{}
	if admin, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	v, err := dc.ServerVersion()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: server version:", err)
		return 1
	}
	fmt.Sscan(v.Minor, &serverVer)
	fmt.Fprintf(os.Stderr, "kube-apiserver %s\n", v.GitVersion)
	if err := setupRBAC(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: RBAC:", err)
		return 1
	}
	user, err := env.AddUser(envtest.User{Name: controllerU}, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: user:", err)
		return 1
	}
	userConfig = user.Config()
	userConfig.WarningHandler = rest.NoWarnings{}
	kc, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: kubeconfig:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "pillar-controller-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	if err := startApp(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: pillar-controller:", err)
		return 1
	}
	code := m.Run()
	if stopApp != nil {
		stopApp()
		<-appDone
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "---- pillar-controller log ----\n%s", logs.String())
	}
	return code
}

// setupRBAC installs config/rbac (the ClusterRole, and the Role in the
// controller's namespace) and binds both to the controller's user.
func setupRBAC(ctx context.Context) error {
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: controllerU}}
	for {
		var u map[string]any
		if err := dec.Decode(&u); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		if u == nil {
			continue
		}
		switch u["kind"] {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := convert(u, &r); err != nil {
				return err
			}
			if err := admin.Create(ctx, &r); err != nil {
				return err
			}
			if err := admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name}}); err != nil {
				return err
			}
		case "Role":
			var r rbacv1.Role
			if err := convert(u, &r); err != nil {
				return err
			}
			if r.Namespace != namespace {
				return fmt.Errorf("Role %s is in namespace %q, want %q", r.Name, r.Namespace, namespace)
			}
			if err := admin.Create(ctx, &r); err != nil {
				return err
			}
			if err := admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: namespace}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected kind %v in role.yaml", u["kind"])
		}
	}
	return nil
}

func convert(u map[string]any, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u, out)
}

// testOptions are the controller's options in these tests: short lease
// and refresh intervals so that failures and recoveries show in seconds.
func testOptions(metricsAddr string) controllerapp.Options {
	o := controllerapp.DefaultOptions()
	o.Namespace = namespace
	o.LeaderElectionID = leaseID
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	o.MetricsAddress, o.HealthAddress = metricsAddr, "0"
	o.AgentRefresh, o.StoreRefresh = 2*time.Second, time.Second
	o.AgentCallTimeout = 3 * time.Second
	o.GracefulShutdown = 5 * time.Second
	o.Version = "v0.0.0-test"
	o.OnAgentRestart = restarts.add
	o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return o
}

func startApp() error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	app, err := controllerapp.New(userConfig, testOptions(addr), nil)
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

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
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
