//go:build kernel

package pillar_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// agentPort is the chart's agent.port.
const agentPort = 9420

// probeCalls are the calls bin/agent-probe makes, in its order.
var probeCalls = []string{"ListExports", "CreateVolume", "DeleteVolume"}

// wantRefused checks agent-probe's output: every call of every run
// answered UNAUTHENTICATED.
func wantRefused(t *testing.T, who string, out string, runs int) {
	t.Helper()
	// The verdicts are the "<call> <code>" lines; the errors' details,
	// "<call>: <error>" on standard error, may be interleaved with them.
	var verdicts [][]string
	for l := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && slices.Contains(probeCalls, f[0]) {
			verdicts = append(verdicts, f)
		}
	}
	if len(verdicts) != runs*len(probeCalls) {
		t.Fatalf("%s: agent-probe printed %q, want %d runs of %v", who, out, runs, probeCalls)
	}
	for i, v := range verdicts {
		if v[0] != probeCalls[i%len(probeCalls)] || v[1] != "Unauthenticated" {
			t.Errorf("%s: %s answered %s, want Unauthenticated", who, v[0], v[1])
		}
	}
}

// TestAgentRefusesStrangers calls the storage node's agent as an attacker
// in the cluster would, without a token and with a made-up one: from an
// ordinary pod (the pod network) and from the node's own network (as a
// hostNetwork pod). ListExports, CreateVolume and DeleteVolume are all
// refused UNAUTHENTICATED, nothing is created on the storage node, the
// agent logs the pod's address, and the agent does not listen on
// loopback, only on the node's address. That pillar-controller, with the
// chart's token, is served is what every other test of the run shows.
func TestAgentRefusesStrangers(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	probe := filepath.Join(lab.root, "bin", "agent-probe")
	if _, err := os.Stat(probe); err != nil {
		t.Fatalf("%v (make cluster-tools builds it)", err)
	}
	ip := storageIP(t, c)
	addr := net.JoinHostPort(ip, strconv.Itoa(agentPort))
	madeUp := strings.Repeat("m", 48)
	const volume = "pvc-agent-probe"

	// From the node's network.
	for _, tok := range []string{"", madeUp} {
		out, err := fixture.Command(ctx, "agent-probe", probe, "-addr", addr, "-token", tok, "-volume", volume, "-zfs-pool", deploy.ZPool)
		if err != nil {
			t.Fatal(err)
		}
		wantRefused(t, "the node's network, token "+strconv.Quote(tok), out, 1)
	}
	if c.PeerName == "" {
		// This guest is the storage node: its loopback is not served.
		out, err := fixture.Command(ctx, "agent-probe", probe, "-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(agentPort)), "-timeout", "10s")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out, "ListExports Unavailable") {
			t.Errorf("the agent answers on 127.0.0.1: %q; it should bind only the node's address", out)
		}
	}
	time.Sleep(2 * time.Second) // the agent logs at most one refusal a second

	// From an ordinary pod, with bin/ of the checkout mounted read-only.
	ns := testNamespace(t, c)
	script := fmt.Sprintf("/probe/agent-probe -addr %s -volume %s -zfs-pool %s; /probe/agent-probe -addr %s -token %s -volume %s -zfs-pool %s",
		addr, volume, deploy.ZPool, addr, madeUp, volume, deploy.ZPool)
	apply(t, c, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: stranger, namespace: %s}
spec:
  restartPolicy: Never
  containers:
  - name: probe
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", %q]
    volumeMounts: [{name: bin, mountPath: /probe, readOnly: true}]
  volumes:
  - name: bin
    hostPath: {path: %s, type: Directory}
`, ns, cluster.BusyboxImage, script, filepath.Join(lab.root, "bin")))
	wait(t, c, ns, "pod/stranger", "jsonpath={.status.phase}=Succeeded", 5*time.Minute)
	wantRefused(t, "an ordinary pod", kubectl(t, c, "logs", "-n", ns, "stranger"), 2)
	podIP := kubectl(t, c, "get", "pod", "-n", ns, "stranger", "-o", "jsonpath={.status.podIP}")

	if ok, err := zvolExists(ctx, volume); err != nil || ok {
		t.Errorf("zvol %s on the storage node after the strangers' CreateVolume: exists %v, %v", volume, ok, err)
	}
	logs := kubectl(t, c, "logs", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "--tail=-1")
	var refused []string
	for l := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(l, "refused an unauthenticated call") {
			refused = append(refused, l)
		}
	}
	if !strings.Contains(strings.Join(refused, "\n"), `"peer":"`+podIP+":") {
		t.Errorf("the agent's log names no refusal from the pod's address %s:\n%s", podIP, strings.Join(refused, "\n"))
	}
	t.Logf("the agent logged %d refusals, among them:\n%s", len(refused), strings.Join(refused, "\n"))
}

// TestGeneratedMutualTLS switches the install to the chart's own
// certificates (helm upgrade --set tls.mode=generated) and back: the
// storage node's agent then runs from its own DaemonSet with a
// certificate that names only its node, pillar-controller reaches it (a
// claim binds, a pod writes and reads), and every stranger is refused
// even with the installation's token: a plaintext caller, a client
// certificate of the same CA issued to another name, and the storage
// node's own certificate. The controller's certificate with a made-up
// token is refused UNAUTHENTICATED; with the real token it is served,
// which shows the probe itself can succeed.
func TestGeneratedMutualTLS(t *testing.T) {
	c := setup(t)
	node := deploy.StorageNode(c)
	t.Cleanup(func() { switchTLSBack(t, c) })
	upgradeTLS(t, c, "generated", nil)

	ds := deploy.Release + "-agent-" + node
	if got := kubectl(t, c, "get", "daemonset", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "jsonpath={.items[*].metadata.name}"); got != ds {
		t.Fatalf("agent DaemonSets %q, want only %s", got, ds)
	}

	// The controller reaches the agent: a claim binds and a pod uses it.
	ns := testNamespace(t, c)
	boundClaim(t, c, ns, "zfs-nvmeof", "64Mi")
	apply(t, c, pod(ns, "rw", "echo mtls > /data/f && sync && cat /data/f", "persistentVolumeClaim: {claimName: data}", false))
	waitSucceeded(t, c, ns, "rw")

	strangersRefused(t, c, deploy.Release+"-agent-tls-"+node)
}

// upgradeTLS switches the install's tls.mode (helm upgrade --reuse-values
// --wait) and waits until the storage node's agent, restarted by the
// change, is Ready as a new instance; it records how long that took.
// meanwhile, when not nil, runs while helm waits.
func upgradeTLS(t *testing.T, c *cluster.Cluster, mode string, meanwhile func()) {
	t.Helper()
	ctx := context.Background()
	chart := filepath.Join(lab.root, "deploy", "charts", "pillar-csi")
	before := kubectl(t, c, "get", "pillaragent", deploy.AgentName, "-o", "jsonpath={.status.instanceID}")
	t0 := time.Now()
	done := make(chan error, 1)
	go func() {
		out, err := c.Helm(ctx, 20*time.Minute, "upgrade", deploy.Release, chart, "-n", deploy.Namespace, "--reuse-values",
			"--set", "tls.mode="+mode, "--wait", "--timeout", "15m")
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, out)
		}
		done <- err
	}()
	// A meanwhile that fails the test still waits for helm, so that a
	// cleanup's own upgrade does not find this one in progress.
	var helmErr error
	waited := false
	waitHelm := func() {
		if !waited {
			helmErr, waited = <-done, true
		}
	}
	defer waitHelm()
	if meanwhile != nil {
		meanwhile()
	}
	waitHelm()
	if helmErr != nil {
		t.Fatalf("helm upgrade to tls.mode %s: %v", mode, helmErr)
	}
	poll(t, "PillarAgent "+deploy.AgentName+" Ready on a new agent", 10*time.Minute, 5*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "pillaragent", deploy.AgentName, "-o",
			`jsonpath={.metadata.generation} {.status.observedGeneration} {.status.instanceID} {.status.conditions[?(@.type=="Ready")].status}`)
		f := strings.Fields(string(out))
		return err == nil && len(f) == 4 && f[0] == f[1] && f[2] != before && f[3] == "True", fmt.Sprintf("%q %v", out, err)
	})
	record(t, "helm upgrade to tls.mode "+mode+", agent Ready", time.Since(t0))
}

// switchTLSBack switches the install back to tls.mode none, for a test's
// cleanup, unless it already is (its PillarAgent references no TLS
// Secret).
func switchTLSBack(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if kubectl(t, c, "get", "pillaragent", deploy.AgentName, "-o", "jsonpath={.spec.tls.secretRef.name}") != "" {
		upgradeTLS(t, c, "none", nil)
	}
}

// secretData is one key of a Secret of the release's namespace; it fails
// the test when the key is missing or empty.
func secretData(t *testing.T, c *cluster.Cluster, secret, key string) []byte {
	t.Helper()
	b64 := kubectl(t, c, "get", "secret", "-n", deploy.Namespace, secret, "-o", "jsonpath={.data."+strings.ReplaceAll(key, ".", `\.`)+"}")
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) == 0 {
		t.Fatalf("Secret %s key %s: %d bytes, %v", secret, key, len(b), err)
	}
	return b
}

// mtlsProbeVolume is the volume the strangers of strangersRefused try to
// create and delete.
const mtlsProbeVolume = "pvc-agent-probe-mtls"

// strangersRefused calls the storage node's agent, which serves with
// mutual TLS, as strangers and as pillar-controller would, with
// bin/agent-probe from this guest: a plaintext caller, a client
// certificate of the release's CA issued to another name, and the
// certificate of the Secret agentSecret (the agent's own) are refused in
// the handshake even with the installation's token; the controller's
// certificate is refused UNAUTHENTICATED with a made-up token and served
// with the real one. Nothing is created on the storage node, and the
// agent logs the refused certificate.
func strangersRefused(t *testing.T, c *cluster.Cluster, agentSecret string) {
	t.Helper()
	ctx := context.Background()
	probe := filepath.Join(lab.root, "bin", "agent-probe")
	node := deploy.StorageNode(c)
	ip := storageIP(t, c)
	addr := net.JoinHostPort(ip, strconv.Itoa(agentPort))

	// The material the strangers use: the installation's token, the
	// chart's CA (with its key, to issue a certificate to another name),
	// the agent's certificate and the controller's.
	dir := t.TempDir()
	save := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := string(secretData(t, c, deploy.Release+"-agent-token", "token"))
	caCert := secretData(t, c, deploy.Release+"-ca", "tls.crt")
	ca := save("ca.crt", caCert)
	intruderCert, intruderKey, err := cluster.IssueClientCert(caCert, secretData(t, c, deploy.Release+"-ca", "tls.key"), "intruder")
	if err != nil {
		t.Fatal(err)
	}
	controllerSecret := deploy.Release + "-controller-client-tls"
	type identity struct{ cert, key string }
	ids := map[string]identity{
		"intruder":   {save("intruder.crt", intruderCert), save("intruder.key", intruderKey)},
		"agent":      {save("agent.crt", secretData(t, c, agentSecret, "tls.crt")), save("agent.key", secretData(t, c, agentSecret, "tls.key"))},
		"controller": {save("controller.crt", secretData(t, c, controllerSecret, "tls.crt")), save("controller.key", secretData(t, c, controllerSecret, "tls.key"))},
	}
	call := func(who string, args ...string) map[string]string {
		t.Helper()
		argv := append([]string{"-addr", addr, "-volume", mtlsProbeVolume, "-zfs-pool", deploy.ZPool, "-server-name", node, "-timeout", "20s"}, args...)
		out, err := fixture.Command(ctx, "agent-probe", probe, argv...)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		codes := map[string]string{}
		for l := range strings.SplitSeq(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && slices.Contains(probeCalls, f[0]) {
				codes[f[0]] = f[1]
			}
		}
		t.Logf("%s: %v", who, codes)
		return codes
	}
	refused := func(who string, codes map[string]string, want string) {
		t.Helper()
		if len(codes) != len(probeCalls) {
			t.Errorf("%s: answers %v, want one for each of %v", who, codes, probeCalls)
		}
		for call, code := range codes {
			if code != want {
				t.Errorf("%s: %s answered %s, want %s", who, call, code, want)
			}
		}
	}
	// A refused handshake reaches the client as UNAVAILABLE.
	refused("plaintext with the token", call("plaintext", "-token", token), "Unavailable")
	refused("another name of the CA with the token", call("intruder", "-token", token, "-ca", ca, "-cert", ids["intruder"].cert, "-key", ids["intruder"].key), "Unavailable")
	refused("the storage node's certificate with the token", call("agent", "-token", token, "-ca", ca, "-cert", ids["agent"].cert, "-key", ids["agent"].key), "Unavailable")
	refused("the controller's certificate with a made-up token", call("controller", "-token", strings.Repeat("m", 48), "-ca", ca, "-cert", ids["controller"].cert, "-key", ids["controller"].key), "Unauthenticated")
	if got := call("control", "-token", token, "-ca", ca, "-cert", ids["controller"].cert, "-key", ids["controller"].key, "-calls", "ListExports"); got["ListExports"] != "OK" {
		t.Errorf("the controller's certificate and token: ListExports %s, want OK (the refusals above would prove nothing)", got["ListExports"])
	}
	if ok, err := zvolExists(ctx, mtlsProbeVolume); err != nil || ok {
		t.Errorf("zvol %s on the storage node after the strangers' CreateVolume: exists %v, %v", mtlsProbeVolume, ok, err)
	}
	logs := kubectl(t, c, "logs", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "--tail=-1")
	if !strings.Contains(logs, "TLS client refused") || !strings.Contains(logs, "intruder") {
		t.Errorf("the agent's log names no refused client certificate of intruder:\n%s", logs)
	}
}
