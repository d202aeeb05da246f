//go:build kernel

package pillar_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

var scaleOutClaims = flag.Int("scaleout.claims", 40, "TestScaleOutTwoStorageNodes: the claims of each burst, on one storage node and then spread over two")

// The second storage node's objects, beside the install's storage-1,
// zfs-tank and zfs-nvmeof on the peer. Its store names the pool the
// peer's does (deploy.ZPool): they are pools of two machines.
const (
	scaleOutAgent = "storage-2"
	scaleOutStore = "zfs-tank-2"
	scaleOutClass = "zfs-nvmeof-2"
	// scaleOutPeerClass is the install's class, on the peer's store.
	scaleOutPeerClass = "zfs-nvmeof"
	// storageNodeLabel is the label the chart's agent DaemonSet selects
	// its nodes by (agent.nodeSelector), as the README's quickstart sets
	// it.
	storageNodeLabel = "pillar-csi.io/storage-node"
)

// scaleOutPowerCut numbers TestScaleOutTwoStorageNodes' power cut among
// the run's requests to the host (TestStorageNodePowerCut's is 1,
// TestTwoWorkers' 2).
const scaleOutPowerCut = 3

// TestScaleOutTwoStorageNodes grows the cluster the way users grow it:
// by a storage node. The main guest's node, the worker, becomes a second
// one as an operator adds one: pools of its own, the label the agent's
// DaemonSet selects (an agent pod starts there), a PillarAgent, a ZFS
// PillarStore and a PillarStorageClass; the peer keeps the install's.
// Both stores name the same pool, each on its own machine: nothing in the
// cluster may take a pool name for unique across agents.
//
//  1. -scaleout.claims claims in one kubectl apply on the peer's class
//     alone, then as many spread half and half over both classes: the
//     time until all are Bound is recorded for each and their ratio
//     logged (each agent serves its own store, so the spread burst should
//     bind faster; speed is reported, never a pass/fail condition). A
//     claim that does not bind fails the test; Warning events are counted
//     and logged. This guest's pool holds a zvol for each claim of its
//     class and no other, and deleting the claims leaves both pools as
//     they were.
//  2. The peer's power is cut while a pod on each node's volume writes.
//     The peer's volume comes back as in TestStorageNodePowerCut
//     (storageOutage); the other node's writer must see nothing of it:
//     no I/O error, no restart, no chunk lost (scaleOutOutage).
//
// The second storage node goes again at the end: claims first (their
// deletion needs its agent), then its class, store and agent, the label,
// and the pools.
func TestScaleOutTwoStorageNodes(t *testing.T) {
	c := setup(t)
	if c.PeerName == "" {
		t.Skip("needs the storage node in a guest of its own, and the main guest's node as a second one: a two-guest run (make e2e-two)")
	}
	n := *scaleOutClaims
	if n < 2 {
		t.Fatalf("-scaleout.claims=%d: the second burst spreads its claims over two storage nodes, so at least 2", n)
	}
	addStorageNode(t, c)

	// A burst that stopped half way (no figures) may leave claims
	// binding or going: nothing after it would measure what it says.
	var one, two perfResult
	t.Run("one-node", func(t *testing.T) { one = scaleOutBurst(t, c, "one storage node", n, scaleOutPeerClass) })
	if one.bound == nil {
		return
	}
	t.Run("two-nodes", func(t *testing.T) {
		two = scaleOutBurst(t, c, "two storage nodes", n, scaleOutPeerClass, scaleOutClass)
	})
	if two.bound == nil {
		return
	}
	a, b := slices.Max(one.bound), slices.Max(two.bound)
	t.Logf("%d claims all Bound in %.1fs on one storage node, in %.1fs over two: %.2f× the time (p50 %.1fs and %.1fs)", n,
		a.Seconds(), b.Seconds(), b.Seconds()/a.Seconds(), percentile(one.bound, 50).Seconds(), percentile(two.bound, 50).Seconds())

	t.Run("power-cut", func(t *testing.T) { scaleOutOutage(t, c) })
}

// addStorageNode makes this guest's node a second storage node, the way
// the README's quickstart makes the first: pools (deploy.NewStorage, as
// the one-guest lab has them), the storage-node label, then the
// PillarAgent, PillarStore and PillarStorageClass of scaleOutObjects,
// each waited for until Ready. The cleanups undo it in the reverse order.
func addStorageNode(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	pools, err := deploy.NewStorage(context.Background(), os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pools.Close(os.Stdout) })
	kubectl(t, c, "label", "node", c.NodeName, storageNodeLabel+"=true")
	t.Cleanup(func() { removeAgentPod(t, c) })
	apply(t, c, scaleOutObjects(c.NodeName))
	t.Cleanup(func() { removeStorageObjects(t, c) })
	wait(t, c, "", "pillaragent/"+scaleOutAgent, "condition=Ready", 10*time.Minute)
	wait(t, c, "", "pillarstore/"+scaleOutStore, "condition=Ready", 5*time.Minute)
	wait(t, c, "", "pillarstorageclass/"+scaleOutClass, "condition=Ready", 5*time.Minute)
	logKubectl(t, c, "get", "pillar", "-o", "wide")
	logKubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "wide")
}

// scaleOutObjects is the second storage node's PillarAgent on node, its
// ZFS store (the examples' zfs-tank on this agent) and its class (the
// examples' zfs-nvmeof on this store, with the install's protocol).
func scaleOutObjects(node string) string {
	return fmt.Sprintf(`apiVersion: pillar-csi.io/v1alpha1
kind: PillarAgent
metadata: {name: %[1]s}
spec: {nodeName: %[2]s}
---
apiVersion: pillar-csi.io/v1alpha1
kind: PillarStore
metadata: {name: %[3]s}
spec:
  agentName: %[1]s
  type: ZFS
  zfs: {pool: %[4]s, parentDataset: pillar, sparse: true, properties: {compression: lz4}}
---
`, scaleOutAgent, node, scaleOutStore, deploy.ZPool) + pillarClass(scaleOutClass, scaleOutStore, "nvmeof-tcp")
}

// removeStorageObjects waits until every PersistentVolume of the second
// node's class is gone (the test's namespaces go without waiting, and
// each volume's DeleteVolume needs the node's agent), then deletes the
// class, the store and the agent, in that order: each one's in-use
// finalizer waits for what uses it.
func removeStorageObjects(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	poll(t, "the PersistentVolumes of "+scaleOutClass+" gone", 15*time.Minute, 3*time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "get", "pv", "-o",
			`jsonpath={range .items[?(@.spec.storageClassName=="`+scaleOutClass+`")]}{.metadata.name}{"\n"}{end}`)
		left := strings.Fields(string(out))
		return err == nil && len(left) == 0, fmt.Sprintf("%d left %v", len(left), err)
	})
	logKubectl(t, c, "delete", "pillarstorageclass", scaleOutClass, "--ignore-not-found", "--wait=true", "--timeout=2m")
	logKubectl(t, c, "delete", "pillarstore", scaleOutStore, "--ignore-not-found", "--wait=true", "--timeout=2m")
	logKubectl(t, c, "delete", "pillaragent", scaleOutAgent, "--ignore-not-found", "--wait=true", "--timeout=2m")
}

// removeAgentPod takes the storage-node label off this guest's node and
// waits until the agent pod there is gone: the pools close next, and the
// run's later tests find the storage node's agent as the only one.
func removeAgentPod(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	pod, err := c.Kubectl(context.Background(), nil, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent",
		"--field-selector", "spec.nodeName="+c.NodeName, "-o", "name")
	logKubectl(t, c, "label", "node", c.NodeName, storageNodeLabel+"-")
	if p := strings.TrimSpace(string(pod)); err == nil && p != "" {
		// Under the harness's 3-minute bound on one kubectl; the pod's
		// grace is longer, but an idle agent exits at once.
		logKubectl(t, c, "wait", "--for=delete", "-n", deploy.Namespace, p, "--timeout=170s")
	}
}

// peerZvols lists the peer's zvols, taken before a part of the test
// creates claims, which its deletion must restore (an earlier test's
// claims may still have been going when this test started).
func peerZvols(t *testing.T) string {
	t.Helper()
	l, err := zvolList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// scaleOutBurst binds n claims created at once, spread in turn over
// classes (claimBurst), records the time until all were Bound under the
// name what, checks that this guest's pool holds a zvol for each claim
// of scaleOutClass and no other, deletes the claims (deleteEverywhere)
// and logs the figures as TestPerformance does.
func scaleOutBurst(t *testing.T, c *cluster.Cluster, what string, n int, classes ...string) perfResult {
	peerBefore := peerZvols(t)
	ns := testNamespace(t, c)
	t0 := time.Now()
	bound := claimBurst(t, c, ns, n, classes...)
	r := perfResult{part: fmt.Sprintf("%d claims at once", n), driver: "pillar-csi on " + what, n: n, bound: bound, warnings: warningEvents(t, c, ns)}
	record(t, fmt.Sprintf("scale out: %d claims on %s, all Bound", n, what), slices.Max(bound))
	logEventSummary(t, c, ns)
	logErrors(t, "pillar-agent", componentLogs(t, c, "agent", "pillar-agent", t0), t0)
	local := 0
	for i := range n {
		if classes[i%len(classes)] == scaleOutClass {
			local++
		}
	}
	if got := localZvols(t); len(got) != local {
		t.Errorf("this guest's pool holds %d zvols with the %d claims bound, want %d (the claims of %s): %v", len(got), n, local, scaleOutClass, got)
	}
	r.deleted = deleteEverywhere(t, c, ns, n, peerBefore)
	t.Logf("measured: %s", r)
	return r
}

// scaleOutOutage cuts the peer's power under storageOutage, which checks
// that the peer's volume comes back, while a pod on this node writes to
// a volume of this node's store (the ticker), and then checks that this
// writer saw nothing of it: still Running and never restarted, the same
// initiator controller still live, a chunk written after the peer's
// recovery (the ticker stops at its first failed write, so a writer that
// saw an I/O error has none), its longest pause recorded, and every
// chunk it reported read back by a new pod.
func scaleOutOutage(t *testing.T, c *cluster.Cluster) {
	peerBefore := peerZvols(t)
	ns := testNamespace(t, c)
	_, _, id := boundClaim(t, c, ns, scaleOutClass, "256Mi")
	volume := "persistentVolumeClaim: {claimName: data}"
	ticks := startTicker(t, c, ns, c.NodeName, volume)
	sum := podSum(t, c, ns, "ticker")
	ctrls := fixture.Controllers(t, id.SubsystemNQN)
	if len(ctrls) != 1 || controllerState(ctrls[0]) != "live" {
		t.Fatalf("initiator controllers of %s: %v, want one live", id.SubsystemNQN, ctrls)
	}

	var cut time.Time
	t.Run("peer", func(t *testing.T) {
		storageOutage(t, c, "scale out: power cut", powerCutHealTimeout, func(t *testing.T, id export.Identity, agentPod string) {
			cut = time.Now()
			powerCut(scaleOutPowerCut)(t, id, agentPod)
		})
	})
	if cut.IsZero() {
		t.Fatal("the peer's power was never cut: nothing to check on this node")
	}
	healed := time.Now()

	if st := kubectl(t, c, "get", "pod", "-n", ns, "ticker", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount}"); st != "Running 0" {
		logKubectl(t, c, "logs", "-n", ns, "ticker", "--tail=20")
		t.Fatalf("this node's writer is %q (phase, restarts) after the peer's power cut, want Running 0", st)
	}
	var written []tick
	poll(t, "a chunk of this node's writer after the peer's recovery", time.Minute, 2*time.Second, func() (bool, string) {
		written = ticks()
		return len(written) > 0 && written[len(written)-1].unix >= healed.Unix(), fmt.Sprintf("%d ticks", len(written))
	})
	during := 0
	for _, tk := range written {
		if tk.unix >= cut.Unix() && tk.unix <= healed.Unix() {
			during++
		}
	}
	t.Logf("this node's writer wrote %d chunks in the %v from the peer's power cut to its recovery", during, healed.Sub(cut).Round(time.Second))
	record(t, "scale out: power cut: the other node's longest write pause", longestGap(written))
	if now := fixture.Controllers(t, id.SubsystemNQN); len(now) != 1 || now[0] != ctrls[0] || controllerState(now[0]) != "live" {
		t.Errorf("this node's initiator controllers of %s after the peer's power cut: %v, want %s live as before", id.SubsystemNQN, now, ctrls[0])
	}

	kubectl(t, c, "delete", "pod", "-n", ns, "ticker", "--wait=true", "--timeout=3m")
	readBack(t, c, ns, c.NodeName, volume, sum, written)
	t.Logf("a new pod read back the blob and all %d chunks this node's writer reported", len(written))
	deleteEverywhere(t, c, ns, 1, peerBefore)
}

// deleteEverywhere deletes the pods and claims of ns (deleteAll, which
// waits for their n PersistentVolumes to go and for the peer's pool to
// hold the zvols of peerBefore again) and checks that this guest's pool
// holds no zvol either.
func deleteEverywhere(t *testing.T, c *cluster.Cluster, ns string, n int, peerBefore string) time.Duration {
	t.Helper()
	d := deleteAll(t, c, ns, n, peerBefore)
	if left := localZvols(t); len(left) > 0 {
		t.Errorf("zvols left in this guest's pool after the claims of %s went: %v", ns, left)
	}
	return d
}

// localZvols is every zvol of the second storage node's pool, the one in
// this guest (zvolList lists the peer's).
func localZvols(t *testing.T) []string {
	t.Helper()
	argv := listZvols()
	out, err := fixture.Command(context.Background(), "list zvols", argv[0], argv[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)
}
