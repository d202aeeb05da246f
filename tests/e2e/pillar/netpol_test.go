//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// The example NetworkPolicy an operator applies in tenants' namespaces
// (SECURITY.md, docs/install.md), and the placeholder it names the
// storage nodes' IPv4 addresses with.
const (
	tenantEgressExample     = "deploy/examples/security/tenant-egress-networkpolicy.yaml"
	tenantEgressPlaceholder = "192.0.2.0/24"
)

// netpolImage is the lab's image of kube-network-policies (make e2e-two
// builds bin/kube-network-policies from the Go module proxy).
const netpolImage = "pillar-lab.local/kube-network-policies:e2e"

// netpolObjects runs kube-network-policies as its project deploys it (a
// hostNetwork DaemonSet that reads pods, namespaces and policies), on
// node alone: the node where the tenant's pods run. NRI is off (the lab's
// containerd 1.6 does not serve it); it then learns pods' addresses from
// the API server. It fails open: v0.8.0 removes its nftables rules on
// SIGINT only, and a kubelet stops it with SIGTERM, so rules it leaves
// behind must not drop the traffic of the run's later tests.
func netpolObjects(node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-network-policies, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-network-policies}
rules:
- {apiGroups: [""], resources: [pods, namespaces], verbs: [list, watch]}
- {apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-network-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-network-policies}
subjects: [{kind: ServiceAccount, name: kube-network-policies, namespace: kube-system}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-network-policies, namespace: kube-system}
spec:
  selector: {matchLabels: {app: kube-network-policies}}
  template:
    metadata: {labels: {app: kube-network-policies}}
    spec:
      hostNetwork: true
      nodeSelector: {kubernetes.io/hostname: %s}
      serviceAccountName: kube-network-policies
      terminationGracePeriodSeconds: 30
      containers:
      - name: netpol
        image: %s
        imagePullPolicy: Never
        args: [--hostname-override=%s, --disable-nri, --fail-open, --metrics-bind-address=127.0.0.1:9080, --v=2]
        securityContext: {privileged: true}
`, node, netpolImage, node)
}

// TestTenantEgressPolicy proves the example NetworkPolicy of
// deploy/examples/security in a cluster that enforces NetworkPolicy
// (kube-network-policies on the worker): without it an ordinary pod opens
// TCP connections to the storage node's agent API (9420), agent metrics
// (9421) and NVMe/TCP (4420, listening for the namespace's bound claim);
// with it, in the pod's namespace, none of them connects, while the pod
// still reaches a pod on the storage node (the policy keeps the tenant
// off the storage node's addresses, not off the network), and a pod of
// that namespace still writes and reads the claim (the worker's kernel,
// not the pod, speaks NVMe/TCP).
//
// It needs two guests (make e2e-two): in one guest the storage node is
// the pod's own node, and traffic from a pod to its own node's address
// is delivered locally, which some NetworkPolicy implementations do not
// filter (kube-network-policies polices the postrouting hook only).
func TestTenantEgressPolicy(t *testing.T) {
	c := setup(t)
	if c.PeerName == "" {
		t.Skip("one guest: the storage node is the pod's own node, whose addresses NetworkPolicy does not cover; make e2e-two runs this test")
	}
	ctx := context.Background()
	bin := filepath.Join(lab.root, "bin")
	for _, f := range []string{"kube-network-policies", "agent-probe"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			t.Fatalf("%v (make e2e-two builds it)", err)
		}
	}
	example, err := os.ReadFile(filepath.Join(lab.root, tenantEgressExample))
	if err != nil {
		t.Fatal(err)
	}
	storage := deploy.StorageNode(c)
	ip := storageIP(t, c)

	// kube-network-policies queues a policed pod's new connections to
	// user space (nfnetlink_queue, nft_queue): load both on the worker.
	if _, err := fixture.Command(ctx, "modprobe", "modprobe", "-a", "nfnetlink_queue", "nft_queue"); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportStatic(ctx, "kube-network-policies", filepath.Join(bin, "kube-network-policies"), netpolImage); err != nil {
		t.Fatal(err)
	}
	apply(t, c, netpolObjects(c.NodeName))
	t.Cleanup(func() {
		logKubectl(t, c, "logs", "-n", "kube-system", "daemonset/kube-network-policies", "--tail=40")
		if out, err := c.Kubectl(ctx, []byte(netpolObjects(c.NodeName)), "delete", "-f", "-", "--wait=true", "--timeout=2m"); err != nil {
			t.Errorf("delete kube-network-policies: %v\n%s", err, out)
		}
	})
	wait(t, c, "kube-system", "daemonset/kube-network-policies", "jsonpath={.status.numberReady}=1", 5*time.Minute)

	ns := testNamespace(t, c)
	// The tenant's claim, bound before the probes: its export makes the
	// storage node's NVMe/TCP port listen (nvmet enables a port with its
	// first subsystem).
	boundClaim(t, c, ns, "zfs-nvmeof", "64Mi")
	// A pod on the storage node listening on a port: the address the
	// policy must leave open.
	apply(t, c, onNode(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: listener, namespace: %s}
spec:
  tolerations: [{operator: Exists}]
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: [nc, -ll, -p, "8080", -e, "true"]
`, ns, cluster.BusyboxImage), storage))
	wait(t, c, ns, "pod/listener", "condition=Ready", 5*time.Minute)
	listener := net.JoinHostPort(kubectl(t, c, "get", "pod", "-n", ns, "listener", "-o", "jsonpath={.status.podIP}"), "8080")
	ports := map[string]string{
		net.JoinHostPort(ip, strconv.Itoa(agentPort)): "the agent's API",
		net.JoinHostPort(ip, "9421"):                  "the agent's metrics",
		net.JoinHostPort(ip, "4420"):                  "NVMe/TCP",
	}
	targets := []string{listener}
	for a := range ports {
		targets = append(targets, a)
	}
	probes := 0
	probe := func() map[string]string {
		t.Helper()
		probes++
		name := fmt.Sprintf("tenant-%d", probes)
		apply(t, c, onNode(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: probe
    image: %s
    imagePullPolicy: Never
    command: [/probe/agent-probe, -connect, %q, -timeout, 5s]
    volumeMounts: [{name: bin, mountPath: /probe, readOnly: true}]
  volumes:
  - name: bin
    hostPath: {path: %s, type: Directory}
`, name, ns, cluster.BusyboxImage, strings.Join(targets, ","), bin), c.NodeName))
		waitSucceeded(t, c, ns, name)
		got := map[string]string{}
		for l := range strings.SplitSeq(kubectl(t, c, "logs", "-n", ns, name), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "connect" {
				got[f[1]] = f[2]
			}
		}
		t.Logf("%s: %v", name, got)
		for _, a := range targets {
			if got[a] == "" {
				t.Fatalf("%s reported nothing for %s", name, a)
			}
		}
		return got
	}

	// Without the policy the tenant reaches every port: the refusals
	// below are the policy's doing.
	for a, v := range probe() {
		if v != "ok" {
			t.Fatalf("before the policy, %s (%s) answered %s, want ok: the test could not see the policy work", a, ports[a], v)
		}
	}

	policy := strings.ReplaceAll(string(example), tenantEgressPlaceholder, ip+"/32")
	if policy == string(example) {
		t.Fatalf("%s names no %s to replace", tenantEgressExample, tenantEgressPlaceholder)
	}
	if out, err := c.Kubectl(ctx, []byte(policy), "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("apply the example policy: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// Before kube-network-policies goes: it then takes the
		// namespace's pods out of its rules.
		logKubectl(t, c, "delete", "networkpolicy", "-n", ns, "--all", "--wait=true", "--timeout=1m")
		time.Sleep(5 * time.Second)
	})
	t0 := time.Now()
	var got map[string]string
	for {
		got = probe()
		closed := 0
		for a := range ports {
			if got[a] != "ok" {
				closed++
			}
		}
		if closed == len(ports) || time.Since(t0) > 2*time.Minute {
			break
		}
	}
	record(t, "NetworkPolicy applied → the storage node's ports closed to the tenant", time.Since(t0))
	for a, what := range ports {
		if got[a] == "ok" {
			t.Errorf("with the policy, the tenant's pod still connects to %s (%s)", a, what)
		}
	}
	if got[listener] != "ok" {
		t.Errorf("with the policy, the tenant's pod cannot reach a pod on the storage node (%s: %s): the example keeps tenants off more than the storage node's addresses", listener, got[listener])
	}

	// The tenant's volume does not need the path the policy closed.
	apply(t, c, onNode(pod(ns, "rw", "echo tenant > /data/f && sync && cat /data/f", "persistentVolumeClaim: {claimName: data}", false), c.NodeName))
	waitSucceeded(t, c, ns, "rw")
	if out := kubectl(t, c, "logs", "-n", ns, "rw"); out != "tenant" {
		t.Errorf("the tenant's pod read %q from its volume, want %q", out, "tenant")
	}
}
