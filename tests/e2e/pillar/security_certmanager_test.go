//go:build kernel

package pillar_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
)

// The Secrets cert-manager writes for the chart's certManager mode
// (templates/tls-certmanager.yaml); each is its Certificate's name too.
// Each storage node's serving certificate is <release>-agent-tls-<node>.
var (
	cmCASecret         = deploy.Release + "-ca"
	cmControllerSecret = deploy.Release + "-controller-client-tls"
)

// TestCertManagerMutualTLS proves the chart's cert-manager mode with a
// real cert-manager: its controllers (bin/cert-manager-controller, built
// from the Go module proxy at the release tests/tools/certmanager pins)
// run in this guest as a process with the admin's kubeconfig, as the
// cluster's own control-plane parts run, and its CRDs are applied first.
// The install is switched to tls.mode certManager and back: cert-manager
// issues the CA, the agents' serving certificate and the controller's
// client certificate; a claim binds and a pod writes; strangers are
// refused as in TestGeneratedMutualTLS. Then, under a pod that writes to
// a volume every second, both certificates are re-issued the way `cmctl
// renew` asks for it (the Certificate's Issuing condition set through the
// status subresource): the Secrets get new certificates, the agent serves
// its new one (a handshake reads its serial), the writer goes on without
// an I/O error, pillar-controller reconnects with its new certificate and
// a new claim binds and is written.
func TestCertManagerMutualTLS(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	node := deploy.StorageNode(c)
	cmAgentSecret := deploy.Release + "-agent-tls-" + node
	bin := filepath.Join(lab.root, "bin")
	crds := filepath.Join(bin, "certmanager-crds")
	if _, err := os.Stat(filepath.Join(crds, "cert-manager.io_certificates.yaml")); err != nil {
		t.Fatalf("cert-manager's CRDs: %v (make certmanager fetches them)", err)
	}

	// cert-manager's CRDs, as its install applies them, removed again at
	// the end (after the controller has stopped: cleanups run last first).
	if out, err := c.Kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		t.Fatalf("cert-manager's CRDs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := c.Kubectl(context.Background(), nil, "delete", "-f", crds, "--ignore-not-found", "--wait=false"); err != nil {
			t.Errorf("deleting cert-manager's CRDs: %v\n%s", err, out)
		}
	})
	wait(t, c, "", "crd/certificates.cert-manager.io", "condition=Established", 2*time.Minute)
	startCertManager(t, c, filepath.Join(bin, "cert-manager-controller"))

	// Back to tls.mode none at the end, then the Secrets cert-manager
	// wrote go: helm does not own them, and the generated mode's Secrets
	// of the same names would otherwise meet them.
	t.Cleanup(func() {
		switchTLSBack(t, c)
		if out, err := c.Kubectl(context.Background(), nil, "delete", "secret", "-n", deploy.Namespace, "--ignore-not-found",
			cmCASecret, cmAgentSecret, cmControllerSecret); err != nil {
			t.Errorf("deleting cert-manager's Secrets: %v\n%s", err, out)
		}
	})
	upgradeTLS(t, c, "certManager", func() {
		// The agent's new pod cannot start before its Secret exists, so
		// helm waits for cert-manager: how long it takes to issue all
		// three certificates.
		t0 := time.Now()
		poll(t, "cert-manager's Secrets", 10*time.Minute, time.Second, func() (bool, string) {
			out, err := c.Kubectl(ctx, nil, "get", "secret", "-n", deploy.Namespace, cmCASecret, cmAgentSecret, cmControllerSecret,
				"-o", `jsonpath={range .items[*]}{.metadata.name}={.data.tls\.crt}{"\n"}{end}`)
			n := 0
			for l := range strings.SplitSeq(string(out), "\n") {
				if _, v, _ := strings.Cut(l, "="); v != "" {
					n++
				}
			}
			return err == nil && n == 3, fmt.Sprintf("%d of 3 Secrets hold a certificate (%v)", n, err)
		})
		record(t, "cert-manager: 3 certificates issued", time.Since(t0))
	})
	logKubectl(t, c, "get", "issuers,certificates,certificaterequests", "-n", deploy.Namespace, "-o", "wide")
	if got := kubectl(t, c, "get", "pillaragent", deploy.AgentName, "-o", "jsonpath={.spec.tls.secretRef.name}"); got != cmControllerSecret {
		t.Fatalf("PillarAgent %s references TLS Secret %q, want %s", deploy.AgentName, got, cmControllerSecret)
	}

	// The controller reaches the agent: a claim binds and a pod uses it.
	ns := testNamespace(t, c)
	boundClaim(t, c, ns, "zfs-nvmeof", "64Mi")
	apply(t, c, pod(ns, "rw", "echo cert-manager > /data/f && sync && cat /data/f", "persistentVolumeClaim: {claimName: data}", false))
	waitSucceeded(t, c, ns, "rw")
	strangersRefused(t, c, cmAgentSecret)

	// The storage node's own agent DaemonSet, mounting its own Secret.
	ds := deploy.Release + "-agent-" + node
	if got := kubectl(t, c, "get", "daemonset", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.template.spec.volumes[?(@.name=="tls")].secret.secretName}{end}`); got != ds+" "+cmAgentSecret {
		t.Fatalf("agent DaemonSets and their TLS Secrets %q, want only %s mounting %s", got, ds, cmAgentSecret)
	}

	// The agent serves the certificate of its Secret.
	ip := storageIP(t, c)
	addr := net.JoinHostPort(ip, strconv.Itoa(agentPort))
	agentSerial := secretSerial(t, c, cmAgentSecret)
	controllerSerial := secretSerial(t, c, cmControllerSecret)
	if got, err := servedSerial(t, c, addr, node); err != nil || got != agentSerial {
		t.Fatalf("the agent serves the certificate with serial %s (%v), its Secret %s holds %s", got, err, cmAgentSecret, agentSerial)
	}
	t.Logf("before the rotation: the agent serves serial %s; the controller's certificate has serial %s", agentSerial, controllerSerial)

	// A pod writes a chunk to its volume every second, each fsynced
	// (restart_test.go's ticker), through the rotation.
	const writer = "ticker"
	apply(t, c, claim(ns, "written", "zfs-nvmeof", "Filesystem", "ReadWriteOnce", "256Mi"))
	wait(t, c, ns, "pvc/written", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	volume := "persistentVolumeClaim: {claimName: written}"
	apply(t, c, pod(ns, writer, tickerScript, volume, false))
	wait(t, c, ns, "pod/"+writer, "condition=Ready", 5*time.Minute)
	ticks := func() []tick { return parseTicks(t, logValues(t, c, ns, writer, "tick")) }
	poll(t, "three ticks of the writer", 3*time.Minute, 2*time.Second, func() (bool, string) {
		n := len(ticks())
		return n >= 3, fmt.Sprintf("%d ticks", n)
	})
	before := len(ticks())

	// The agent's and the controller's pods, which must see the rotation
	// through without a restart.
	pods := func() string {
		return kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component in (agent,controller)",
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.containerStatuses[*].restartCount}{"\n"}{end}`)
	}
	podsBefore := pods()

	// The rotation: both certificates re-issued, as cmctl renew asks.
	t0 := time.Now()
	for _, crt := range []string{cmAgentSecret, cmControllerSecret} {
		renewCertificate(t, c, crt)
	}
	t.Logf("re-issue of %s and %s requested at %s", cmAgentSecret, cmControllerSecret, t0.UTC().Format(time.RFC3339))
	var issued, served time.Duration
	var newAgent, newController, lastServed string
	poll(t, "new certificates in both Secrets and served by the agent", 10*time.Minute, time.Second, func() (bool, string) {
		if issued == 0 {
			newAgent, newController = secretSerial(t, c, cmAgentSecret), secretSerial(t, c, cmControllerSecret)
			if newAgent == agentSerial || newController == controllerSerial {
				return false, fmt.Sprintf("serials: agent %s, controller %s (before: %s, %s)", newAgent, newController, agentSerial, controllerSerial)
			}
			issued = time.Since(t0)
			t.Logf("%.1fs: both Secrets hold new certificates", issued.Seconds())
		}
		got, err := servedSerial(t, c, addr, node)
		if state := fmt.Sprintf("%s (%v)", got, err); state != lastServed {
			// Each change of what the agent serves, old serial first.
			t.Logf("%.1fs: the agent serves serial %s", time.Since(t0).Seconds(), state)
			lastServed = state
		}
		if err != nil || got != newAgent {
			return false, fmt.Sprintf("the agent serves serial %s (%v), its Secret holds %s (before the rotation %s)", got, err, newAgent, agentSerial)
		}
		served = time.Since(t0)
		return true, ""
	})
	record(t, "rotation: both Secrets re-issued", issued)
	record(t, "rotation: agent serves its new certificate", served)
	t.Logf("after the rotation: the agent serves serial %s; the controller's certificate has serial %s", newAgent, newController)

	// The writer went on: three more ticks once the agent serves the new
	// certificate, still running, never restarted (its script stops at
	// the first failed write).
	rotated := len(ticks())
	poll(t, "the writer's ticks after the rotation", 3*time.Minute, time.Second, func() (bool, string) {
		n := len(ticks())
		return n >= rotated+3, fmt.Sprintf("%d ticks (%d before the rotation, %d when it was done)", n, before, rotated)
	})
	if after := pods(); after != podsBefore {
		t.Errorf("the agent's or the controller's pods changed or restarted in the rotation:\nbefore\n%s\nafter\n%s", podsBefore, after)
	}
	if st := kubectl(t, c, "get", "pod", "-n", ns, writer, "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}"); st != "Running 0 true" {
		t.Errorf("the writer after the rotation: phase, restarts, ready %q, want Running 0 true", st)
	}

	// pillar-controller, which reads its Secret through the API,
	// reconnects with the new material, and a new claim binds and is
	// written: the new client certificate is accepted.
	apply(t, c, claim(ns, "fresh", "zfs-nvmeof", "Filesystem", "ReadWriteOnce", "64Mi"))
	wait(t, c, ns, "pvc/fresh", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	apply(t, c, pod(ns, "rw2", "echo rotated > /data/f && sync && cat /data/f", "persistentVolumeClaim: {claimName: fresh}", false))
	waitSucceeded(t, c, ns, "rw2")
	poll(t, "pillar-controller reconnecting to the agent with the new certificate", 3*time.Minute, 5*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "logs", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=controller", "-c", "pillar-controller",
			"--tail=-1", "--since-time="+t0.UTC().Format(time.RFC3339))
		for l := range strings.SplitSeq(string(out), "\n") {
			if strings.Contains(l, "agent target changed; reconnecting") && strings.Contains(l, deploy.AgentName) {
				t.Logf("pillar-controller: %s", l)
				return true, ""
			}
		}
		return false, fmt.Sprintf("no reconnect logged since %s (%v)", t0.UTC().Format(time.RFC3339), err)
	})

	// Every chunk the writer reported reads back.
	written := ticks()
	t.Logf("the writer's longest pause between two chunks: %v (%d chunks, %d before the rotation)", longestGap(written), len(written), before)
	sum := podSum(t, c, ns, writer)
	kubectl(t, c, "delete", "pod", "-n", ns, writer, "--wait=true", "--timeout=3m")
	readBack(t, c, ns, "", volume, sum, written)
}

// startCertManager runs cert-manager's controllers (bin) in this guest
// for the rest of the test, for the release's namespace only, with the
// cluster admin's kubeconfig and without leader election (one process).
// Its output goes to a file, logged when the test fails.
func startCertManager(t *testing.T, c *cluster.Cluster, bin string) {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v (make certmanager builds it)", err)
	}
	logFile := filepath.Join(t.TempDir(), "cert-manager.log")
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-kubeconfig", c.Kubeconfig, "-namespace", deploy.Namespace, "-v", "2")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-exited:
			t.Errorf("cert-manager-controller exited before the test ended: %v", err)
		default:
			// SIGTERM ends its controllers; after 30 s the process
			// group is killed.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("cert-manager-controller on SIGTERM: %v", err)
				}
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				t.Logf("cert-manager-controller did not stop within 30 s of SIGTERM: killed (%v)", <-exited)
			}
		}
		out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			if len(b) > 64<<10 {
				b = b[len(b)-64<<10:]
			}
			t.Logf("cert-manager-controller's log (the end):\n%s", b)
		}
	})
	t.Logf("cert-manager-controller started (pid %d), log %s", cmd.Process.Pid, logFile)
}

// renewCertificate asks cert-manager to issue a Certificate of the
// release's namespace anew, as `cmctl renew` does: it sets the
// Certificate's Issuing condition to True, reason ManuallyTriggered,
// through the status subresource.
func renewCertificate(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	if got := kubectl(t, c, "get", "certificate", "-n", deploy.Namespace, name, "-o", `jsonpath={.status.conditions[?(@.type=="Issuing")].status}`); got != "" {
		t.Fatalf("Certificate %s is issuing already (Issuing %s)", name, got)
	}
	gen := kubectl(t, c, "get", "certificate", "-n", deploy.Namespace, name, "-o", "jsonpath={.metadata.generation}")
	patch := fmt.Sprintf(`[{"op":"add","path":"/status/conditions/-","value":{"type":"Issuing","status":"True","reason":"ManuallyTriggered",`+
		`"message":"Certificate re-issuance manually triggered","lastTransitionTime":%q,"observedGeneration":%s}}]`,
		time.Now().UTC().Format(time.RFC3339), gen)
	kubectl(t, c, "patch", "certificate", "-n", deploy.Namespace, name, "--subresource=status", "--type=json", "-p", patch)
}

// secretSerial is the serial number, in hex, of the certificate in a
// Secret's tls.crt.
func secretSerial(t *testing.T, c *cluster.Cluster, secret string) string {
	t.Helper()
	block, _ := pem.Decode(secretData(t, c, secret, "tls.crt"))
	if block == nil {
		t.Fatalf("Secret %s: no PEM in tls.crt", secret)
	}
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("Secret %s: %v", secret, err)
	}
	return crt.SerialNumber.Text(16)
}

// servedSerial is the serial number, in hex, of the certificate the
// agent at addr serves now: a TLS handshake as pillar-controller makes
// it, with the controller's current certificate, checking the agent's
// against the CA for the name serverName.
func servedSerial(t *testing.T, c *cluster.Cluster, addr, serverName string) (string, error) {
	t.Helper()
	pair, err := tls.X509KeyPair(secretData(t, c, cmControllerSecret, "tls.crt"), secretData(t, c, cmControllerSecret, "tls.key"))
	if err != nil {
		t.Fatalf("Secret %s: %v", cmControllerSecret, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secretData(t, c, cmControllerSecret, "ca.crt")) {
		t.Fatalf("Secret %s: no CA certificate in ca.crt", cmControllerSecret)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{
		RootCAs:      roots,
		ServerName:   serverName,
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{"h2"},
		MinVersion:   tls.VersionTLS12,
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("TLS handshake with the agent at %s: %w", addr, err)
	}
	defer conn.Close()
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return "", fmt.Errorf("TLS handshake with the agent at %s: a %T, not a TLS connection", addr, conn)
	}
	peer := tc.ConnectionState().PeerCertificates
	if len(peer) == 0 {
		return "", fmt.Errorf("TLS handshake with the agent at %s: no certificate", addr)
	}
	return peer[0].SerialNumber.Text(16), nil
}
