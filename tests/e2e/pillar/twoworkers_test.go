//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// workerRebootPowerCut numbers TestTwoWorkers' power cut among the run's
// requests to the host (TestStorageNodePowerCut's is 1).
const workerRebootPowerCut = 2

// TestTwoWorkers uses both nodes of a two-guest run as workers: the main
// guest's node and the storage node (cordoned for the scheduler, so its
// pods are placed by name). One RWO volume on ZFS:
//
//  1. is written by a pod on the main node;
//  2. is refused to the other node while it is published there: a
//     VolumeAttachment for the storage node makes csi-attacher call
//     ControllerPublishVolume, which must fail naming the node that holds
//     the volume, and withdrawing that attachment must leave the holder's
//     publication and its writes alone;
//  3. moves: the writer is deleted and a pod on the storage node reads
//     back everything it wrote, after the volume was unpublished from the
//     main node (its host NQN gone from the subsystem's allowed_hosts).
//
// Then a second volume survives a real reboot of the worker that uses
// it: a pod on the storage node writes, that guest's power is cut and it
// boots again (kernel, kubelet and containerd state, mounts gone; its
// disks, with the pools and pillar-node's stage records, kept). Its
// kubelet starts the pod again, which must find its data and write on,
// and a new pod there reads back every chunk reported before the cut.
// The rebooted worker is also the storage node, so this reboots the
// volume's target and its initiator at once.
func TestTwoWorkers(t *testing.T) {
	c := setup(t)
	if c.PeerName == "" {
		t.Skip("needs a second node: a two-guest run (make e2e-two)")
	}
	ctx := context.Background()
	ns := testNamespace(t, c)
	pv, volumeID, id := boundClaim(t, c, ns, "zfs-nvmeof", "256Mi")
	mainNQN, peerNQN := hostNQN(t, c, c.NodeName), hostNQN(t, c, c.PeerName)
	if mainNQN == peerNQN {
		t.Fatalf("both nodes present host NQN %s: the storage node's access list cannot tell them apart", mainNQN)
	}
	hosts := filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN, "allowed_hosts")
	mainAllowed, peerAllowed := filepath.Join(hosts, mainNQN), filepath.Join(hosts, peerNQN)
	volume := "persistentVolumeClaim: {claimName: data}"

	// 1. A writer on the main node.
	apply(t, c, onNode(pod(ns, "ticker", tickerScript, volume, false), c.NodeName))
	wait(t, c, ns, "pod/ticker", "condition=Ready", 5*time.Minute)
	ticks := func(name string) []tick { return parseTicks(t, logValues(t, c, ns, name, "tick")) }
	waitTicks := func(name string, n int) {
		poll(t, fmt.Sprintf("%d ticks of %s", n, name), 3*time.Minute, 2*time.Second, func() (bool, string) {
			got := len(ticks(name))
			return got >= n, fmt.Sprintf("%d ticks", got)
		})
	}
	waitTicks("ticker", 3)

	// 2. The other node is refused while the main node holds the volume.
	va := "e2e-second-node"
	apply(t, c, fmt.Sprintf(`apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: %s}
spec:
  attacher: pillar-csi.io
  nodeName: %s
  source: {persistentVolumeName: %s}
`, va, c.PeerName, pv))
	var attachErr string
	poll(t, "csi-attacher's error on VolumeAttachment "+va, 3*time.Minute, time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "volumeattachment", va, "-o", "jsonpath={.status.attached} {.status.attachError.message}")
		attachErr = strings.TrimSpace(string(out))
		return err == nil && attachErr != "" && attachErr != "false", fmt.Sprintf("%q %v", out, err)
	})
	t.Logf("VolumeAttachment %s for %s: %s", va, c.PeerName, attachErr)
	if !strings.HasPrefix(attachErr, "false ") || !strings.Contains(attachErr, "FailedPrecondition") || !strings.Contains(attachErr, c.NodeName) {
		t.Errorf("VolumeAttachment for the second node: %q, want attached false and a FailedPrecondition naming %s", attachErr, c.NodeName)
	}
	kubectl(t, c, "delete", "volumeattachment", va, "--wait=true", "--timeout=3m")
	if pubs := kubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", "jsonpath={.spec.publications[*].nodeID}"); !strings.HasPrefix(pubs, c.NodeName+"/") || strings.Contains(pubs, " ") {
		t.Errorf("after the refused attachment PillarVolumeState %s records publications %q, want the main node's alone", volumeID, pubs)
	}
	if ok, err := storageHas(ctx, c, mainAllowed); err != nil || !ok {
		t.Errorf("after the refused attachment the main node's host NQN is not on allowed_hosts (%v)", err)
	}
	if ok, err := storageHas(ctx, c, peerAllowed); err != nil || ok {
		t.Errorf("after the refused attachment the storage node's host NQN is on allowed_hosts (%v)", err)
	}
	n := len(ticks("ticker"))
	waitTicks("ticker", n+3)
	t.Logf("the writer on %s went on writing: %d ticks before the withdrawn attachment, %d after", c.NodeName, n, len(ticks("ticker")))

	// 3. The volume moves to the storage node.
	written := ticks("ticker")
	sum := podSum(t, c, ns, "ticker")
	t0 := time.Now()
	kubectl(t, c, "delete", "pod", "-n", ns, "ticker", "--wait=true", "--timeout=3m")
	readBack(t, c, ns, c.PeerName, volume, sum, written)
	record(t, "two workers: writer deleted → read back on the other node", time.Since(t0))
	if ok, err := storageHas(ctx, c, mainAllowed); err != nil || ok {
		t.Errorf("after the move the main node's host NQN is still on allowed_hosts (%v)", err)
	}
	t.Logf("a pod on %s read back the blob and all %d chunks written on %s", c.PeerName, len(written), c.NodeName)

	deleteClaim(t, c, ns, pv, volumeID, zvolExists, "two workers")

	// A writer on the storage node, on a claim of its own (the first one
	// is gone; this one takes its name), and that node's power cut.
	pv, volumeID, _ = boundClaim(t, c, ns, "zfs-nvmeof", "256Mi")
	// restartPolicy Always, as a Deployment's or StatefulSet's pod has.
	writer := strings.Replace(pod(ns, "ticker2", tickerScript, volume, false), "restartPolicy: Never", "restartPolicy: Always", 1)
	apply(t, c, onNode(writer, c.PeerName))
	wait(t, c, ns, "pod/ticker2", "condition=Ready", 5*time.Minute)
	waitTicks("ticker2", 3)
	written = ticks("ticker2")
	sum = podSum(t, c, ns, "ticker2")
	bootID := kubectl(t, c, "get", "node", c.PeerName, "-o", "jsonpath={.status.nodeInfo.bootID}")
	t1 := time.Now()
	if err := guest.CutPeerPower(ctx, workerRebootPowerCut, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("the power of %s was cut with %d ticks reported written", c.PeerName, len(written))
	poll(t, c.PeerName+" Ready after a new boot", powerCutHealTimeout, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "node", c.PeerName, "-o", `jsonpath={.status.nodeInfo.bootID} {.status.conditions[?(@.type=="Ready")].status}`)
		f := strings.Fields(string(out))
		return err == nil && len(f) == 2 && f[0] != bootID && f[1] == "True", fmt.Sprintf("%q %v", out, err)
	})
	record(t, "worker reboot: node Ready again", time.Since(t1))
	// The rebooted kubelet starts the writer's container again, which
	// stages and mounts the volume anew (pillar-node's stage record of it
	// is on the node's disk, its mount is gone); the writer keeps its blob
	// and goes on after the last chunk it finds.
	var resumedAt string
	poll(t, "the writer started again on the rebooted node", powerCutHealTimeout, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "pod", "-n", ns, "ticker2", "-o", "jsonpath={.status.phase} restarts={.status.containerStatuses[0].restartCount} running={.status.containerStatuses[0].state.running.startedAt}")
		if err != nil {
			return false, err.Error()
		}
		if strings.HasSuffix(strings.TrimSpace(string(out)), "running=") {
			return false, string(out) // no log to read yet
		}
		starts := logValues(t, c, ns, "ticker2", "start")
		if len(starts) == 0 || starts[0] == "0" {
			return false, fmt.Sprintf("%s, start=%v", out, starts)
		}
		resumedAt = starts[0]
		return len(logValues(t, c, ns, "ticker2", "tick")) >= 3, fmt.Sprintf("%s, start=%v", out, starts)
	})
	record(t, "worker reboot: power cut → the pod writes again", time.Since(t1))
	if got := podSum(t, c, ns, "ticker2"); got != sum {
		t.Errorf("after the reboot the writer's blob has sha256 %s, it wrote %s", got, sum)
	}
	t.Logf("the writer started again on %s and went on from chunk %s (%d reported before the cut)", c.PeerName, resumedAt, len(written))
	logKubectl(t, c, "get", "pod", "-n", ns, "-o", "wide")
	kubectl(t, c, "delete", "pod", "-n", ns, "ticker2", "--wait=true", "--timeout=3m")
	readBack(t, c, ns, c.PeerName, volume, sum, written)
	t.Logf("a new pod on %s read back the blob and all %d chunks reported before the cut", c.PeerName, len(written))
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, "worker reboot")
}

// onNode places a pod manifest (pod's) on node by name, past the
// scheduler and a cordon.
func onNode(manifest, node string) string {
	return strings.Replace(manifest, "\nspec:\n", fmt.Sprintf("\nspec:\n  nodeName: %s\n", node), 1)
}

// hostNQN is the host NQN of node's initiator, from its CSINode's node ID
// (<node name>/<host NQN>).
func hostNQN(t *testing.T, c *cluster.Cluster, node string) string {
	t.Helper()
	nodeID := kubectl(t, c, "get", "csinode", node, "-o", `jsonpath={.spec.drivers[?(@.name=="pillar-csi.io")].nodeID}`)
	id, err := export.ParseNodeID(nodeID)
	if err != nil {
		t.Fatalf("CSINode %s: %v", node, err)
	}
	return id.HostNQN
}
