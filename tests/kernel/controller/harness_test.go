//go:build kernel

package controller

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"

	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

const (
	// namespace is the controller's: its Lease, its Role and the agents'
	// TLS Secrets live there.
	namespace = "pillar-csi"
	// controllerUser is who pillar-controller authenticates as; only the
	// generated RBAC is bound to it.
	controllerUser = "system:serviceaccount:pillar-csi:pillar-controller"
	// leaseName is the controller's leader-election Lease.
	leaseName = "pillar-controller-kernel-test"
	// startTimeout bounds the start of each binary in the guest.
	startTimeout = 3 * time.Minute
	// statusTimeout bounds the wait for a status the controller is to
	// write (a reconcile, an agent call, a status patch: seconds on the
	// host, tens of seconds in the guest under load).
	statusTimeout = 3 * time.Minute
	// callTimeout bounds one call of the test's own to the agent or the
	// API server.
	callTimeout = time.Minute
	// poll is how often a wait looks again.
	poll = 500 * time.Millisecond
)

// lab is what every test of the package shares: one API server and one
// pillar-controller, started by the first test that needs them.
type lab struct {
	root string // the repository
	bin  string // its bin/
	// adminConfig and admin are a cluster administrator's, for the
	// tests' own reads and writes.
	adminConfig *rest.Config
	admin       client.Client
	kubeconfig  string // of controllerUser
	controller  *proc
	// controllers are every pillar-controller process started, the
	// current one last (a test may kill one and start another).
	controllers    []*proc
	controllerArgs []string
	metricsAddr    string // the controller's /metrics
	// csiEndpoint is where pillar-controller serves the CSI Identity
	// and Controller services (-csi-endpoint).
	csiEndpoint string
	// tokenDir holds the installation's agent token, as the chart's
	// Secret does: every agent's -token-dir, and its "token" file the
	// controller's -agent-token-file.
	tokenDir string
	// token sends that token with the tests' own agent calls.
	token *agentauth.ClientToken
}

var shared struct {
	once sync.Once
	lab  *lab
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if l := shared.lab; l != nil {
		l.stop()
	}
	os.Exit(code)
}

// setup returns the shared lab, starting it on first use. It fails the
// test, never skips it: outside the kernel lab, or without the binaries
// that `make test-kernel` builds, nothing here can be proven.
func setup(t testing.TB) *lab {
	t.Helper()
	guest.RequireGuest(t)
	first := false
	shared.once.Do(func() {
		first = true
		shared.lab, shared.err = start(t)
	})
	if shared.err != nil {
		if !first {
			t.Fatalf("lab: did not start in an earlier test: %v", shared.err)
		}
		t.Fatalf("lab: %v", shared.err)
	}
	l := shared.lab
	if l == nil {
		t.Fatal("lab: did not start in an earlier test (see its log)")
	}
	// The controller log of this test alone, on failure.
	mark := l.controller.log.Len()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- pillar-controller log (this test) ----\n%s", l.controller.log.From(mark))
			if l.controller.exited() {
				t.Logf("pillar-controller has exited: %v", l.controller.err)
			}
		}
	})
	return l
}

func start(t testing.TB) (*lab, error) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return nil, err
	}
	l := &lab{root: root, bin: filepath.Join(root, "bin")}
	for _, b := range []string{"pillar-controller", "pillar-agent", "pillar-node"} {
		if _, err := os.Stat(filepath.Join(l.bin, b)); err != nil {
			return nil, fmt.Errorf("%s is missing from %s (%w): `make test-kernel` builds pillar-controller, pillar-agent and pillar-node there; "+
				"this suite never builds Go code in the guest", b, l.bin, err)
		}
	}
	// etcd and kube-apiserver run on the host (pillar-lab test
	// -apiserver): emulated in the guest, they took a minute to start
	// and much of the guest's CPU from the binaries under test.
	adminKubeconfig := os.Getenv(kernelvm.KubeconfigEnv)
	if adminKubeconfig == "" {
		return nil, fmt.Errorf("$%s is not set: this suite needs the API server that `pillar-lab test -apiserver` runs on the host "+
			"(make test-kernel passes it for this package)", kernelvm.KubeconfigEnv)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the host's API server: %w", err)
	}
	cfg.WarningHandler = rest.NoWarnings{}
	// No client-side rate limit, as pillar-controller has none
	// (ctrl.GetConfig): client-go's default of 5 requests a second would
	// make every back-to-back request of the tests' wait 200 ms, and
	// apiLatency measure that limit instead of the API server.
	cfg.QPS = -1
	l.adminConfig = cfg
	if l.admin, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if err := l.installRBAC(); err != nil {
		return nil, fmt.Errorf("installing csidriver/config/rbac: %w", err)
	}
	t.Logf("the host's API server answers at %s; RBAC installed", cfg.Host)
	// pillar-controller is controllerUser, bound to the generated RBAC
	// alone: the administrator's credential, impersonating it, so that
	// the API server authorizes every request as controllerUser.
	kc, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return nil, err
	}
	for _, u := range kc.AuthInfos {
		u.Impersonate = controllerUser
	}
	dir, err := os.MkdirTemp("", "pillar-controller")
	if err != nil {
		return nil, err
	}
	l.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, l.kubeconfig); err != nil {
		l.stop()
		return nil, err
	}
	l.tokenDir = filepath.Join(dir, "agent-token")
	if err := os.Mkdir(l.tokenDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(l.tokenDir, agentauth.ClientKey), []byte(rand.Text()+rand.Text()), 0o600); err != nil {
		return nil, err
	}
	if l.token, err = agentauth.NewClientToken(filepath.Join(l.tokenDir, agentauth.ClientKey)); err != nil {
		return nil, err
	}
	if err := l.startController(t); err != nil {
		l.stop()
		return nil, err
	}
	return l, nil
}

// installRBAC creates the controller's namespace and csidriver/config/rbac
// (a ClusterRole, and a Role in the namespace), each bound to
// controllerUser alone.
func (l *lab) installRBAC() error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := l.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(l.root, "csidriver", "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: controllerUser}}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var roles, clusterRoles int
	for {
		var u map[string]any
		if err := dec.Decode(&u); errors.Is(err, io.EOF) {
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
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &r); err != nil {
				return err
			}
			if err := l.admin.Create(ctx, &r); err != nil {
				return err
			}
			if err := l.admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name}}); err != nil {
				return err
			}
			clusterRoles++
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &r); err != nil {
				return err
			}
			if r.Namespace != namespace {
				return fmt.Errorf("Role %s is in namespace %q, want %q", r.Name, r.Namespace, namespace)
			}
			if err := l.admin.Create(ctx, &r); err != nil {
				return err
			}
			if err := l.admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: namespace}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}); err != nil {
				return err
			}
			roles++
		default:
			return fmt.Errorf("unexpected kind %v in role.yaml", u["kind"])
		}
	}
	if roles != 1 || clusterRoles != 1 {
		return fmt.Errorf("role.yaml has %d ClusterRole(s) and %d Role(s), want one of each", clusterRoles, roles)
	}
	return nil
}

// startController runs bin/pillar-controller as controllerUser, leader
// elected as in a real deployment (with a Lease loose enough for a busy
// guest), and waits until it holds the Lease.
func (l *lab) startController(t testing.TB) error {
	metrics, health := freePort(t), freePort(t)
	l.csiEndpoint = "unix://" + filepath.Join(os.TempDir(), fmt.Sprintf("pillar-controller-%d.sock", os.Getpid()))
	l.metricsAddr = fmt.Sprintf("127.0.0.1:%d", metrics)
	l.controllerArgs = []string{"-namespace", namespace,
		"-leader-elect=true", "-leader-election-id", leaseName,
		"-lease-duration", "60s", "-renew-deadline", "45s", "-retry-period", "2s",
		"-tls-secret-namespaces", namespace,
		"-metrics-address", l.metricsAddr,
		"-health-address", fmt.Sprintf("127.0.0.1:%d", health),
		"-agent-refresh", "10s", "-store-refresh", "2s",
		// For the reconcilers' agent calls (the CSI calls' keep the
		// test's deadline): an agent in a busy TCG guest takes tens of
		// seconds.
		"-agent-call-timeout", "90s",
		"-csi-endpoint", l.csiEndpoint,
		"-agent-token-file", filepath.Join(l.tokenDir, agentauth.ClientKey),
		"-log-level", "debug"}
	if err := l.launchController(); err != nil {
		return err
	}
	return l.waitLease(t, "")
}

// launchController starts a pillar-controller process with the lab's
// arguments; the earlier processes' logs stay in l.controllers.
func (l *lab) launchController() error {
	p, err := startProc("pillar-controller", filepath.Join(l.bin, "pillar-controller"), []string{"KUBECONFIG=" + l.kubeconfig}, l.controllerArgs...)
	if err != nil {
		return err
	}
	l.controller = p
	l.controllers = append(l.controllers, p)
	return nil
}

// waitLease waits until the Lease has a holder other than old ("" for
// any holder): a successor takes a Lease its SIGKILLed predecessor never
// released only once the Lease has expired.
func (l *lab) waitLease(t testing.TB, old string) error {
	p := l.controller
	began := time.Now()
	deadline := began.Add(startTimeout)
	for {
		holder, err := l.leaseHolder()
		if err == nil && holder != "" && holder != old {
			t.Logf("pillar-controller holds its Lease (%s) %v after start (guest time)", holder, time.Since(began).Round(10*time.Millisecond))
			return nil
		}
		if p.exited() {
			return fmt.Errorf("pillar-controller exited: %v\n---- its log ----\n%s", p.err, p.log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pillar-controller did not take its Lease in %v (holder %q, last read: %v)\n---- its log ----\n%s", startTimeout, holder, err, p.log)
		}
		time.Sleep(poll)
	}
}

// leaseHolder is the leader-election Lease's holder identity.
func (l *lab) leaseHolder() (string, error) {
	var lease coordinationv1.Lease
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := l.admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leaseName}, &lease); err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

func (l *lab) stop() {
	if l.controller != nil {
		l.controller.terminate(30 * time.Second)
	}
	if l.kubeconfig != "" {
		os.RemoveAll(filepath.Dir(l.kubeconfig))
	}
}

// ---------------------------------------------------------------- processes

// proc is a running binary of bin/ and its combined output.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// startProc runs path with args in a process group of its own (so that
// a kill reaches the zfs and lvm commands it runs, as a container's end
// would), env added to the test's environment.
func startProc(name, path string, env []string, args ...string) (*proc, error) {
	p := &proc{name: name, log: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process group and waits for the process.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM, as the kubelet does, and SIGKILL after grace.
func (p *proc) terminate(grace time.Duration) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// agent is a bin/pillar-agent process on 127.0.0.1 and the test's own
// client of it.
type agent struct {
	t     testing.TB
	l     *lab
	node  string
	port  int
	args  []string
	creds credentials.TransportCredentials // the test's client side
	proc  *proc
	logs  []*proc // every process started, for the failure log
	conn  *grpc.ClientConn
	api   agentv1.AgentServiceClient
}

// startAgent runs pillar-agent for node on a fresh port and fencing
// directory, with mutual TLS if pki is not nil, and waits until it
// answers GetAgentInfo. The agent is killed at cleanup.
func startAgent(t testing.TB, l *lab, node string, pki *pki) *agent {
	t.Helper()
	a := &agent{t: t, l: l, node: node, port: freePort(t), creds: insecure.NewCredentials()}
	a.args = []string{"-listen-address", a.addr(), "-metrics-address", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"-node-name", node, "-generations-dir", filepath.Join(t.TempDir(), "generations"), "-token-dir", l.tokenDir,
		"-log-level", "debug", "-log-format", "text", "-readiness-interval", "2s"}
	if pki != nil {
		a.args = append(a.args, "-tls-cert-file", pki.serverCert, "-tls-key-file", pki.serverKey, "-tls-ca-file", pki.caFile,
			"-tls-client-name", "pillar-controller")
		a.creds = credentials.NewTLS(pki.clientTLS())
	}
	conn, err := grpc.NewClient(a.addr(), grpc.WithTransportCredentials(a.creds), grpc.WithPerRPCCredentials(l.token))
	if err != nil {
		t.Fatal(err)
	}
	a.conn, a.api = conn, agentv1.NewAgentServiceClient(conn)
	t.Cleanup(func() {
		if a.proc != nil && !a.proc.exited() {
			a.proc.terminate(30 * time.Second)
		}
		conn.Close()
		if t.Failed() {
			for i, p := range a.logs {
				t.Logf("---- pillar-agent %s log (process %d of %d, %v) ----\n%s", node, i+1, len(a.logs), p.err, p.log)
			}
		}
	})
	a.start()
	return a
}

func (a *agent) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.port)) }

// start runs the agent process and waits until it answers.
func (a *agent) start() {
	a.t.Helper()
	p, err := startProc("pillar-agent", filepath.Join(a.l.bin, "pillar-agent"), nil, a.args...)
	if err != nil {
		a.t.Fatal(err)
	}
	a.proc = p
	a.logs = append(a.logs, p)
	began := time.Now()
	deadline := began.Add(startTimeout)
	for {
		info, err := a.info()
		if err == nil {
			a.t.Logf("pillar-agent %s (instance %s) answers on %s after %v (guest time)", info.GetAgentVersion(), info.GetInstanceId(),
				a.addr(), time.Since(began).Round(10*time.Millisecond))
			return
		}
		if p.exited() {
			a.t.Fatalf("pillar-agent exited: %v\n%s", p.err, p.log)
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("pillar-agent does not answer on %s after %v: %v", a.addr(), startTimeout, err)
		}
		time.Sleep(poll)
	}
}

// info asks the agent directly, as the controller does.
func (a *agent) info() (*agentv1.GetAgentInfoResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.api.GetAgentInfo(ctx, &agentv1.GetAgentInfoRequest{})
}

// kill SIGKILLs the agent, as an OOM kill or a node's kernel would.
func (a *agent) kill() { a.proc.kill() }

// ---------------------------------------------------------------- TLS

// pki is the mutual-TLS material of one agent and its controller: a CA,
// a server certificate for 127.0.0.1, and a client certificate, as
// files for the agent and PEM for the controller's Secret.
type pki struct {
	caFile, serverCert, serverKey string
	caPEM, clientCert, clientKey  []byte
	// strangerCert and strangerKey are a client certificate of the same CA
	// issued to another name than pillar-controller.
	strangerCert, strangerKey []byte
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "pillar-csi kernel-test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(cn string, usage x509.ExtKeyUsage, ips []net.IP) (certPEM, keyPEM []byte) {
		k := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: serial(t),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := &pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	serverCert, serverKey := leaf("pillar-agent", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.clientCert, p.clientKey = leaf("pillar-controller", x509.ExtKeyUsageClientAuth, nil)
	p.strangerCert, p.strangerKey = leaf("tenant-workload", x509.ExtKeyUsageClientAuth, nil)
	dir := t.TempDir()
	p.caFile, p.serverCert, p.serverKey = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{p.caFile: p.caPEM, p.serverCert: serverCert, p.serverKey: serverKey} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// clientTLS is the client side the controller gets from the Secret, for
// the test's own calls.
func (p *pki) clientTLS() *tls.Config {
	return p.tlsAs(p.clientCert, p.clientKey)
}

// tlsAs is a client side presenting cert and key.
func (p *pki) tlsAs(cert, key []byte) *tls.Config {
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		panic(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.caPEM)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// secret is the controller's side of the material, as the Helm chart's
// provided-Secret mode wants it.
func (p *pki) secret(name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"ca.crt": p.caPEM, "tls.crt": p.clientCert, "tls.key": p.clientKey},
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ---------------------------------------------------------------- objects

func agentObj(name, node string, port int, tlsSecret string) *v1alpha1.PillarAgent {
	a := &v1alpha1.PillarAgent{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PillarAgentSpec{NodeName: v1alpha1.ObjectName(node), Address: "127.0.0.1", Port: int32(port)}}
	if tlsSecret != "" {
		a.Spec.TLS = &v1alpha1.AgentTLS{SecretRef: v1alpha1.SecretReference{Name: v1alpha1.ObjectName(tlsSecret), Namespace: namespace}}
	}
	return a
}

// create creates the objects and deletes them at cleanup, dumping them
// (with their events) first if the test failed.
func (l *lab) create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		err := l.admin.Create(ctx, o)
		cancel()
		if err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			if t.Failed() {
				l.dump(t, o)
			}
			if err := l.admin.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				t.Errorf("delete %T %s: %v", o, o.GetName(), err)
			}
		})
	}
}

// dump logs an object as the API server has it, and its events.
func (l *lab) dump(t testing.TB, o client.Object) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cur := o.DeepCopyObject().(client.Object)
	if err := l.admin.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
		t.Logf("---- %T %s: %v", o, o.GetName(), err)
		return
	}
	cur.SetManagedFields(nil)
	if _, ok := cur.(*corev1.Secret); ok {
		t.Logf("---- Secret %s/%s exists (data not shown)", cur.GetNamespace(), cur.GetName())
		return
	}
	b, _ := json.MarshalIndent(cur, "", "  ")
	t.Logf("---- %T %s ----\n%s", o, o.GetName(), b)
	var evs eventsv1.EventList
	if err := l.admin.List(ctx, &evs); err != nil {
		t.Logf("events: %v", err)
		return
	}
	for _, e := range evs.Items {
		if e.Regarding.Name == o.GetName() {
			t.Logf("event %s %s %s: %s", e.CreationTimestamp.Format(time.RFC3339), e.Type, e.Reason, e.Note)
		}
	}
}

// ---------------------------------------------------------------- helpers

// eventually calls check every poll until it reports done, and fails the
// test with what check last saw once timeout passes.
func eventually(t testing.TB, what string, timeout time.Duration, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, state := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, state)
		}
		time.Sleep(poll)
	}
}

func freePort(t testing.TB) int { return fixture.FreeTCPPort(t) }

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// From is what was written after the first n bytes.
