//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// The connect options of the short-loss protocol: the initiator gives up
// ctrlLoss after it lost the target (plus up to one reconnect delay, the
// kernel's rounding; csidriver/node/doc.go).
const (
	shortLossProtocol = "nvmeof-tcp-short-loss"
	shortLossClass    = "zfs-nvmeof-short-loss"
	ctrlLoss          = 20 * time.Second
)

// shortLossObjects is a PillarProtocol like the examples' but on port
// 4421 and with ctrlLossTimeoutSeconds 20, and a PillarStorageClass on
// it, so that an outage outlasts ctrl_loss_tmo in seconds rather than the
// examples' 10 minutes.
var shortLossObjects = fmt.Sprintf(`apiVersion: pillar-csi.io/v1alpha1
kind: PillarProtocol
metadata: {name: %[1]s}
spec:
  type: NVMeOFTCP
  nvmeofTCP:
    bindAddress: 0.0.0.0
    port: 4421
    aclEnabled: true
    connect: {ctrlLossTimeoutSeconds: %[2]d, reconnectDelaySeconds: 5, keepAliveTimeoutSeconds: 5}
---
`, shortLossProtocol, int(ctrlLoss.Seconds())) + pillarClass(shortLossClass, "zfs-tank", shortLossProtocol)

// proberScript writes and fsyncs a small file every 2 s and exits with
// the error when a write fails: the application of a Deployment, whose
// pod restarts its container (restartPolicy Always).
const proberScript = `while :; do if ! err=$(date +%s | dd of=/data/probe conv=fsync 2>&1); then echo "probe failed: $err"; exit 1; fi; echo "probe=ok"; sleep 2; done`

// agentOutage is the node selector that keeps pillar-agent's DaemonSet
// off every node while TestStorageNodeDownPastCtrlLoss holds it.
const agentOutage = "pillar-csi.io/e2e-outage"

// TestStorageNodeDownPastCtrlLoss keeps the storage node away longer than
// the volume's ctrl_loss_tmo while two pods use the volume: the ticker
// (restartPolicy Never, the checked writes) and a prober (restartPolicy
// Always, as a Deployment's pod). The export leaves configfs and
// pillar-agent is kept off the node, so nobody can bring it back. The
// worker's initiator must give up after ctrl_loss_tmo and delete its
// controller; from then on the pods' I/O fails. When the storage node is
// back (the agent scheduled again, the export pushed back) nothing
// reconnects: the kernel deleted the controller, and the filesystem
// mounted on its device is dead. The recovery an operator owes is to
// delete the pods: kubelet unstages the volume and the next pod stages it
// anew, and reads back every chunk the ticker reported written. The test
// records what each step looked like, for docs/troubleshooting.md.
func TestStorageNodeDownPastCtrlLoss(t *testing.T) {
	c := setup(t)
	if c.PeerName != "" {
		t.Skip("a two-guest run: the storage node's outage here is made with configfs of the guest the test runs in")
	}
	ctx := context.Background()
	apply(t, c, shortLossObjects)
	t.Cleanup(func() {
		if out, err := c.Kubectl(ctx, nil, "delete", "pillarstorageclass", shortLossClass, "--ignore-not-found", "--wait=false"); err != nil {
			t.Logf("delete PillarStorageClass %s: %v\n%s", shortLossClass, err, out)
		}
		if out, err := c.Kubectl(ctx, nil, "delete", "pillarprotocol", shortLossProtocol, "--ignore-not-found", "--wait=false"); err != nil {
			t.Logf("delete PillarProtocol %s: %v\n%s", shortLossProtocol, err, out)
		}
	})
	poll(t, "StorageClass "+shortLossClass, 2*time.Minute, time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "storageclass", shortLossClass, "-o", "name")
		return err == nil, strings.TrimSpace(string(out))
	})

	ns := testNamespace(t, c)
	pv, volumeID, id := boundClaim(t, c, ns, shortLossClass, "256Mi")
	if got := kubectl(t, c, "get", "pv", pv, "-o", `jsonpath={.spec.csi.volumeAttributes.pillar-csi\.io/ctrlLossTimeoutSeconds}`); got != fmt.Sprint(int(ctrlLoss.Seconds())) {
		t.Fatalf("PV %s: ctrlLossTimeoutSeconds %q in its volume attributes, want %d", pv, got, int(ctrlLoss.Seconds()))
	}
	volume := "persistentVolumeClaim: {claimName: data}"
	apply(t, c, pod(ns, "ticker", tickerScript, volume, false))
	apply(t, c, strings.Replace(pod(ns, "prober", proberScript, volume, false), "restartPolicy: Never", "restartPolicy: Always", 1))
	wait(t, c, ns, "pod/ticker", "condition=Ready", 5*time.Minute)
	wait(t, c, ns, "pod/prober", "condition=Ready", 5*time.Minute)
	ticks := func() []tick { return parseTicks(t, logValues(t, c, ns, "ticker", "tick")) }
	poll(t, "three ticks of the writer", 3*time.Minute, 2*time.Second, func() (bool, string) {
		n := len(ticks())
		return n >= 3, fmt.Sprintf("%d ticks", n)
	})
	sum := podSum(t, c, ns, "ticker")
	ctrls := fixture.Controllers(t, id.SubsystemNQN)
	if len(ctrls) != 1 || controllerState(ctrls[0]) != "live" {
		t.Fatalf("initiator controllers of %s: %v, want one live", id.SubsystemNQN, ctrls)
	}
	ctrl := ctrls[0]

	// The outage: pillar-agent kept off the node (its pod ends), then the
	// export gone from configfs, as after a reboot of a node that does not
	// come back.
	ds := kubectl(t, c, "get", "daemonset", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "jsonpath={.items[0].metadata.name}")
	agentBack := func() {
		kubectl(t, c, "patch", "daemonset", "-n", deploy.Namespace, ds, "-p",
			fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:null}}}}}`, agentOutage))
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			agentBack()
		}
	})
	kubectl(t, c, "patch", "daemonset", "-n", deploy.Namespace, ds, "-p",
		fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:"true"}}}}}`, agentOutage))
	poll(t, "pillar-agent's pod gone", 3*time.Minute, time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "name")
		return err == nil && strings.TrimSpace(string(out)) == "", strings.TrimSpace(string(out))
	})
	t0 := time.Now()
	fixture.WipeExport(t, id.SubsystemNQN)
	before := len(ticks())
	t.Logf("the storage node is gone: pillar-agent off the node, the export wiped from configfs, with %d ticks written", before)

	// The initiator reconnects every 5 s until ctrl_loss_tmo, then deletes
	// its controller; the pods' writes fail from then on.
	states := []string{controllerState(ctrl)}
	poll(t, "the initiator's controller deleted after ctrl_loss_tmo", ctrlLoss+2*time.Minute, 500*time.Millisecond, func() (bool, string) {
		if s := controllerState(ctrl); s != states[len(states)-1] {
			states = append(states, s)
		}
		return len(fixture.Controllers(t, id.SubsystemNQN)) == 0, strings.Join(states, " → ")
	})
	gone := time.Since(t0)
	t.Logf("initiator %s: %s", ctrl, strings.Join(states, " → "))
	record(t, "storage node down past ctrl_loss_tmo: controller deleted", gone)
	if gone < ctrlLoss {
		t.Errorf("the initiator deleted its controller %v after the target went, before ctrl_loss_tmo (%v)", gone, ctrlLoss)
	}
	wait(t, c, ns, "pod/ticker", "jsonpath={.status.phase}=Failed", 3*time.Minute)
	record(t, "storage node down past ctrl_loss_tmo: writer failed", time.Since(t0))
	written := ticks()
	t.Logf("the ticker failed after %d ticks (%d before the outage), the last at %s", len(written), before, lastTickTime(written))
	logKubectl(t, c, "get", "pod", "-n", ns, "ticker", "-o", `jsonpath={.status.containerStatuses[0].state}`)
	poll(t, "the prober restarted after a failed write", 3*time.Minute, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "pod", "-n", ns, "prober", "-o", "jsonpath={.status.containerStatuses[0].restartCount}")
		n := strings.TrimSpace(string(out))
		return err == nil && n != "" && n != "0", "restarts: " + n
	})

	// The storage node is back: the agent runs again, the controller
	// pushes the export back. Nothing reconnects.
	agentBack()
	restored = true
	subsys := filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN)
	poll(t, "the export back in configfs", 5*time.Minute, time.Second, func() (bool, string) {
		ok, err := storageHas(ctx, c, subsys)
		return ok, fmt.Sprint(err)
	})
	record(t, "storage node down past ctrl_loss_tmo: export back", time.Since(t0))
	// Two more reconnect delays and a probe restart: still no controller,
	// and the prober still fails on the dead filesystem.
	time.Sleep(15 * time.Second)
	if left := fixture.Controllers(t, id.SubsystemNQN); len(left) > 0 {
		t.Errorf("after ctrl_loss_tmo the initiator has controllers of %s again: %v", id.SubsystemNQN, left)
	}
	ready := kubectl(t, c, "get", "pod", "-n", ns, "prober", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state}`)
	t.Logf("prober with the export back: ready, restarts, state: %s", ready)
	logKubectl(t, c, "logs", "-n", ns, "prober", "--tail=3")
	if strings.HasPrefix(ready, "True") {
		if out, err := c.Kubectl(ctx, nil, "logs", "-n", ns, "prober", "--tail=3"); err == nil && strings.Contains(string(out), "probe=ok") {
			t.Errorf("the prober writes again without being deleted; docs/troubleshooting.md says it cannot:\n%s", out)
		}
	}
	logKubectl(t, c, "describe", "pod", "-n", ns, "prober")

	// The recovery: delete the pods; a new one stages the volume anew.
	t1 := time.Now()
	kubectl(t, c, "delete", "pod", "-n", ns, "ticker", "prober", "--wait=true", "--timeout=3m")
	record(t, "storage node down past ctrl_loss_tmo: pods deleted", time.Since(t1))
	readBack(t, c, ns, "", volume, sum, written)
	record(t, "storage node down past ctrl_loss_tmo: pods deleted until the data read back", time.Since(t1))
	t.Logf("a new pod read back the blob and all %d chunks the ticker reported", len(written))
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, "storage node down past ctrl_loss_tmo")
}
