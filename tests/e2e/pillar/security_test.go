//go:build kernel

package pillar_test

import (
	"context"
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
	node := deploy.StorageNode(c)
	ip := kubectl(t, c, "get", "node", node, "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
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
