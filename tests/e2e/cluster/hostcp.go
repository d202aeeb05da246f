package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm"
)

// The host's control plane. Under TCG the guest's etcd, kube-apiserver,
// controller manager and scheduler took most of its two emulated CPUs (in
// one make check run 488 of the 673 s of CPU the cluster's start used,
// and 296 of every 525 s while the tests ran), so the pods under test
// starved beside them. With `pillar-lab test -cluster-control-plane`
// they run natively on the host instead, and the guest holds only the
// node: containerd, the kubelet, kube-proxy and the pods.
//
// The ways between them:
//   - the node and every pod reach the API server at
//     kernelvm.HostAddr through QEMU's user-mode network (the guest's
//     eth0; pods' connections are masqueraded to its address), the pods
//     through the `kubernetes` Service as in any cluster;
//   - the API server reaches the kubelets (logs, exec, port-forward)
//     through an HTTP CONNECT proxy that the guest's harness serves on
//     EgressPort, which QEMU forwards from a port of the host's loopback
//     and the API server's egress selector names. The proxy speaks TLS
//     and takes only clients with a certificate of the cluster's CA.

// ControlPlaneEnv names the variable that gives a guest's cluster
// harness the directory of the host's control plane.
const ControlPlaneEnv = "PILLAR_LAB_CONTROL_PLANE"

// EgressPort is the guest's port of the proxy to the kubelets.
const EgressPort = 8131

// hostControlPlane is what the guest's harness knows of the host's
// control plane: the directory it shares and the API server's address
// as the guest reaches it.
type hostControlPlane struct {
	dir, url string
}

// HostControlPlaneOptions say where the host's control plane lives.
type HostControlPlaneOptions struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and
	// kube-scheduler.
	BinDir string
	// Dir holds the PKI, the configuration, etcd's data and the logs; the
	// guest must see it (kernelvm.TestOptions.Expose).
	Dir string
	// EgressHostPort is the host's loopback port that QEMU forwards to the
	// guest's EgressPort (kernelvm.TestOptions.Forward).
	EgressHostPort int
	// Log receives one line per step; os.Stderr if nil.
	Log io.Writer
}

// HostControlPlane is the lab cluster's control plane running on the
// host for a guest's node.
type HostControlPlane struct {
	c *Cluster
	// Dir is HostControlPlaneOptions.Dir.
	Dir string
}

// StartHostControlPlane starts etcd, kube-apiserver, the controller
// manager and the scheduler on the host's loopback and writes into Dir
// what a guest's harness needs to run a node against them.
func StartHostControlPlane(ctx context.Context, o HostControlPlaneOptions) (*HostControlPlane, error) {
	if o.Log == nil {
		o.Log = os.Stderr
	}
	c := &Cluster{opts: Options{BinDir: o.BinDir, StateDir: o.Dir, Log: o.Log}, start: time.Now()}
	ports, err := freePorts(4)
	if err != nil {
		return nil, fmt.Errorf("the host's control plane: %w", err)
	}
	if err := c.writeHostControlPlane(ports[0], o.EgressHostPort); err != nil {
		return nil, fmt.Errorf("the host's control plane: %w", err)
	}
	cp := controlPlane{
		advertise: kernelvm.HostAddr, bind: "127.0.0.1", port: ports[0],
		etcdClient:    ports[1],
		egressConfig:  c.dir("egress-selector.yaml"),
		managerPort:   ports[2],
		schedulerPort: ports[3],
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := c.runControlPlane(ctx, cp); err != nil {
		for _, d := range c.daemons {
			fmt.Fprintf(o.Log, "---- %s ----\n%s\n", d.name, d.tail(8<<10))
		}
		return nil, errors.Join(fmt.Errorf("start the host's control plane: %w", err), c.Stop())
	}
	return &HostControlPlane{c: c, Dir: o.Dir}, nil
}

// writeHostControlPlane writes the PKI, the controller manager's and
// the scheduler's kubeconfigs, the egress selector's configuration, and
// the file "server" that gives the guest the API server's address.
func (c *Cluster) writeHostControlPlane(port, egressHostPort int) error {
	pki := c.dir("pki")
	for _, d := range []string{pki, c.dir("logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var err error
	if c.ca, err = newCA(); err != nil {
		return err
	}
	if err := c.ca.writeCA(pki); err != nil {
		return err
	}
	if err := c.writeServerPKI(pki, kernelvm.HostAddr); err != nil {
		return err
	}
	if err := c.writeKubeconfigs(fmt.Sprintf("https://127.0.0.1:%d", port), "controller-manager", "scheduler"); err != nil {
		return err
	}
	egress := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      tcp:
        url: https://127.0.0.1:%d
        tlsConfig:
          caBundle: %s
          clientCert: %s
          clientKey: %s
`, egressHostPort, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "apiserver-kubelet-client.crt"), filepath.Join(pki, "apiserver-kubelet-client.key"))
	if err := os.WriteFile(c.dir("egress-selector.yaml"), []byte(egress), 0o644); err != nil {
		return err
	}
	url := fmt.Sprintf("https://%s:%d\n", kernelvm.HostAddr, port)
	return os.WriteFile(c.dir("server"), []byte(url), 0o644)
}

// Stop stops the control plane's components, newest first, and removes
// nothing: Dir holds their logs.
func (h *HostControlPlane) Stop() error { return h.c.Stop() }

// Logs are the components' log files.
func (h *HostControlPlane) Logs() []string {
	var logs []string
	for _, d := range h.c.daemons {
		logs = append(logs, d.log)
	}
	return logs
}

// freePorts returns n distinct free TCP ports of the host's loopback.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort returns a free TCP port of the host's loopback.
func FreePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// hostControlPlaneFromEnv is the host's control plane that
// ControlPlaneEnv names, or nil.
func hostControlPlaneFromEnv() (*hostControlPlane, error) {
	dir := os.Getenv(ControlPlaneEnv)
	if dir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "server"))
	if err != nil {
		return nil, fmt.Errorf("the host's control plane ($%s): %w", ControlPlaneEnv, err)
	}
	return &hostControlPlane{dir: dir, url: strings.TrimSpace(string(b))}, nil
}

// connectHostControlPlane makes the node's way to the host's control
// plane and back, and waits for the API server's /readyz.
func (c *Cluster) connectHostControlPlane(ctx context.Context) error {
	// Pods reach the API server through eth0 only with the guest's
	// address as their source: QEMU's user-mode network answers nothing
	// else.
	rule := []string{"POSTROUTING", "-o", "eth0", "-j", "MASQUERADE"}
	if _, err := run(ctx, cmdTimeout, nil, "iptables", append([]string{"-t", "nat", "-A"}, rule...)...); err != nil {
		return fmt.Errorf("masquerade the pods' connections to the host: %w", err)
	}
	c.onStop("remove the masquerade rule", func() error {
		_, err := run(context.Background(), cmdTimeout, nil, "iptables", append([]string{"-t", "nat", "-D"}, rule...)...)
		return err
	})
	if err := c.startEgressProxy(); err != nil {
		return err
	}
	return c.waitReady(ctx, c.hostCP.url)
}

// startEgressProxy serves the HTTP CONNECT proxy through which the
// host's API server reaches the kubelets, on the guest's address of the
// host's network (where QEMU forwards the host's port to) only.
func (c *Cluster) startEgressProxy() error {
	srv, _, err := c.serveEgressProxy(net.JoinHostPort(kernelvm.GuestAddr, strconv.Itoa(EgressPort)))
	if err != nil {
		return err
	}
	// Close leaves the tunnels be; they end with the kubelet, which stops
	// before the proxy, and with the guest.
	c.onStop("stop the proxy to the kubelets", srv.Close)
	return nil
}

// serveEgressProxy serves the proxy on addr with TLS, taking only
// clients whose certificate the cluster's CA issued, and returns the
// address it listens on.
func (c *Cluster) serveEgressProxy(addr string) (*http.Server, net.Addr, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	kp, err := c.ca.issue("pillar-lab-egress-proxy", nil, []string{"127.0.0.1", host})
	if err != nil {
		return nil, nil, err
	}
	cert, err := tls.X509KeyPair(kp.cert, kp.key)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.ca.pem)
	l, err := tls.Listen("tcp", addr, &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("the proxy to the kubelets: %w", err)
	}
	srv := &http.Server{
		Handler:           &egressProxy{log: c.opts.Log},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(c.opts.Log, "cluster: egress proxy: ", 0),
	}
	go srv.Serve(l) //nolint:errcheck // ends with Close
	return srv, l.Addr(), nil
}

// egressProxy answers CONNECT to the cluster's nodes and pods.
type egressProxy struct {
	log io.Writer
}

func (p *egressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT", http.StatusMethodNotAllowed)
		return
	}
	up, err := net.DialTimeout("tcp", r.Host, 30*time.Second)
	if err != nil {
		fmt.Fprintf(p.log, "cluster: egress proxy: %v\n", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	_, err = rw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err == nil {
		err = rw.Flush()
	}
	if err != nil {
		up.Close()
		down.Close()
		return
	}
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	go pipe(up, down)
	go pipe(down, up)
}
