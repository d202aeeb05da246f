//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// The restart test's pod scripts. The ticker writes a blob, then one
// chunk a second, each fsynced, and logs "tick=<n> <sha256> <unix time>"
// for every chunk that reached the volume; the checker prints the same
// line for every chunk file it finds, so the two logs compare directly.
// A ticker that starts again on the same volume (its node rebooted) keeps
// the blob it finds, says at which chunk it starts ("start=<n>"; a first
// start says 0) and writes on from there.
const (
	tickerScript = `set -e; if [ ! -e /data/blob ]; then dd if=/dev/urandom of=/data/blob.new bs=1M count=$MIB 2>/dev/null; sync; mv /data/blob.new /data/blob; sync; fi; set -- $(sha256sum /data/blob); echo "sum=$1"
i=0; while [ -e /data/chunk.$i ]; do i=$((i+1)); done; echo "start=$i"
while :; do dd if=/dev/urandom of=/data/chunk.$i bs=64k count=1 conv=fsync 2>/dev/null; set -- $(sha256sum /data/chunk.$i); echo "tick=$i $1 $(date +%s)"; i=$((i+1)); sleep 1; done`
	checkerScript = `set -e; set -- $(sha256sum /data/blob); echo "sum=$1"
i=0; while [ -e /data/chunk.$i ]; do set -- $(sha256sum /data/chunk.$i); echo "tick=$i $1"; i=$((i+1)); done`
)

// TestStorageNodeRestart does to the storage node what a reboot does to
// it, while a pod writes: the volume's export leaves configfs (port link,
// allowed host, namespace, subsystem) and pillar-agent dies (its pod is
// force-deleted, so its process is SIGKILLed; the DaemonSet starts a new
// one). Nobody else acts. The controller must see the new agent instance
// and push the export back, the kernel initiator must reconnect by
// itself, the pod's fsynced writes must resume, and a new pod must read
// back every chunk the writer reported, before the outage and after.
//
// One guest is storage node and worker here, so the zvol and the kernel
// survive: a two-guest run does the real thing (TestStorageNodePowerCut).
func TestStorageNodeRestart(t *testing.T) {
	c := setup(t)
	if c.PeerName != "" {
		t.Skip("a two-guest run: TestStorageNodePowerCut cuts the storage node's power instead")
	}
	storageOutage(t, c, "storage-node restart", 5*time.Minute, func(t *testing.T, id export.Identity, agentPod string) {
		fixture.WipeExport(t, id.SubsystemNQN)
		kubectl(t, c, "delete", "pod", "-n", deploy.Namespace, agentPod, "--grace-period=0", "--force", "--wait=false")
		t.Logf("export wiped from configfs and agent pod %s force-deleted", agentPod)
	})
}

// TestStorageNodePowerCut cuts the power of the storage node, a guest of
// its own, while a pod on the worker writes to a volume it exports: its
// QEMU is killed, with no shutdown and no sync, and booted again from the
// same disks. Everything in its kernel is gone (configfs, the
// device-mapper tables, the imported pool) and so is everything its
// kubelet ran; what survives is its disks, as on a real machine. Its boot
// imports the pool and rejoins the cluster; the DaemonSet's agent pod
// starts on it again. Nobody else acts: the controller must see the new
// agent instance and push the export back, the worker's kernel initiator
// must reconnect across the link by itself, the pod's fsynced writes must
// resume, and a new pod must read back every chunk the writer reported.
func TestStorageNodePowerCut(t *testing.T) {
	c := setup(t)
	if c.PeerName == "" {
		t.Skip("needs the storage node in a guest of its own: a two-guest run (make e2e-two)")
	}
	storageOutage(t, c, "storage-node power cut", powerCutHealTimeout, powerCut(1))
}

// powerCut is the outage of storageOutage that cuts the power of the
// storage node, the peer guest; n numbers the request to the host and
// must be new in the run.
func powerCut(n int) func(t *testing.T, id export.Identity, agentPod string) {
	return func(t *testing.T, _ export.Identity, agentPod string) {
		if err := guest.CutPeerPower(context.Background(), n, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Logf("the storage node's power was cut; agent pod %s died with it", agentPod)
	}
}

// storageOutage runs one outage of the storage node (disrupt) under a pod
// that writes, and checks that everything heals without anybody acting
// within heal: the agent's new pod, the controller noticing the new
// instance, the push, and the initiator's next reconnect attempt (every
// reconnectDelaySeconds of the PillarProtocol, 10 s in the examples). Its
// figures are recorded under the name what.
func storageOutage(t *testing.T, c *cluster.Cluster, what string, heal time.Duration, disrupt func(t *testing.T, id export.Identity, agentPod string)) {
	ctx := context.Background()
	ns := testNamespace(t, c)
	pv, volumeID, id := boundClaim(t, c, ns, "zfs-nvmeof", "256Mi")
	volume := "persistentVolumeClaim: {claimName: data}"
	ticks := startTicker(t, c, ns, "", volume)
	ctrls := fixture.Controllers(t, id.SubsystemNQN)
	if len(ctrls) != 1 {
		t.Fatalf("initiator controllers of %s: %v, want one", id.SubsystemNQN, ctrls)
	}
	ctrl := ctrls[0]
	// The storage node's agent pod: another storage node runs one too
	// (TestScaleOutTwoStorageNodes).
	agentPod := kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent",
		"--field-selector", "spec.nodeName="+deploy.StorageNode(c), "-o", "jsonpath={.items[0].metadata.name}")
	before := len(ticks())
	t.Logf("before the outage: %d ticks written; initiator %s is %s; agent pod %s", before, ctrl, controllerState(ctrl), agentPod)

	t0 := time.Now()
	disrupt(t, id, agentPod)

	subsys := filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN)
	var exported, live time.Duration
	states := []string{controllerState(ctrl)}
	poll(t, "the export back in configfs and the initiator live", heal, 500*time.Millisecond, func() (bool, string) {
		if s := controllerState(ctrl); s != states[len(states)-1] {
			states = append(states, s)
		}
		if exported == 0 {
			if ok, _ := storageHas(ctx, c, subsys); ok {
				exported = time.Since(t0)
			}
		}
		// Live again once the export is back. On a busy guest the 500 ms
		// polls can miss the initiator's whole reconnect, so a state that
		// never left live counts too; the writes resuming below is the
		// proof that the data path came back.
		if exported != 0 && live == 0 && states[len(states)-1] == "live" {
			live = time.Since(t0)
		}
		return exported != 0 && live != 0, fmt.Sprintf("exported after %v, controller states %v", exported, states)
	})
	if len(states) == 1 {
		t.Logf("initiator %s: never seen other than live in the polls (its reconnect, if any, fell between two)", ctrl)
	}
	t.Logf("initiator %s: %s", ctrl, strings.Join(states, " → "))
	record(t, what+": export back", exported)
	record(t, what+": initiator live", live)
	logKubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "wide")
	// Where the recovery's time went: when the agent's container started
	// again and what the controller saw of it (its events' ages).
	t.Logf("the outage began at %s", t0.UTC().Format(time.RFC3339))
	logKubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o",
		`jsonpath={range .items[*]}{.metadata.name}: agent container started {.status.containerStatuses[0].state.running.startedAt}{"\n"}{end}`)
	logKubectl(t, c, "describe", "pillaragent", deploy.AgentName)
	ev := kubectl(t, c, "get", "events", "-A", "--field-selector", "reason=ExportsPushed", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	if ev == "" {
		t.Errorf("no ExportsPushed event after the agent's restart")
	} else {
		t.Logf("ExportsPushed events:\n%s", ev)
	}

	// The writes resume: three more ticks after the export is back.
	var resumed time.Duration
	poll(t, "the writer's ticks to resume", 3*time.Minute, time.Second, func() (bool, string) {
		n := len(ticks())
		if n >= before+3 && resumed == 0 {
			resumed = time.Since(t0)
		}
		return resumed != 0, fmt.Sprintf("%d ticks (%d before the outage)", n, before)
	})
	record(t, what+": writes resumed", resumed)
	written := ticks()
	t.Logf("the writer's longest pause between two chunks: %v", longestGap(written))
	sum := podSum(t, c, ns, "ticker")
	kubectl(t, c, "delete", "pod", "-n", ns, "ticker", "--wait=true", "--timeout=3m")
	// The writer may have written chunks after the last read of its log:
	// the checker must find at least every chunk seen here.

	readBack(t, c, ns, "", volume, sum, written)
	t.Logf("a new pod read back the blob and all %d chunks (%d written before the outage)", len(written), before)
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, what)
}

// startTicker starts the ticker pod "ticker" in ns on volume, on node
// ("" leaves it to the scheduler), waits until it has written three
// chunks, and returns the reader of the ticks it has logged.
func startTicker(t *testing.T, c *cluster.Cluster, ns, node, volume string) func() []tick {
	t.Helper()
	ticker := pod(ns, "ticker", tickerScript, volume, false)
	if node != "" {
		ticker = onNode(ticker, node)
	}
	apply(t, c, ticker)
	wait(t, c, ns, "pod/ticker", "condition=Ready", 5*time.Minute)
	logKubectl(t, c, "get", "pod", "-n", ns, "ticker", "-o", "wide")
	ticks := func() []tick { return parseTicks(t, logValues(t, c, ns, "ticker", "tick")) }
	poll(t, "three ticks of the writer", 3*time.Minute, 2*time.Second, func() (bool, string) {
		n := len(ticks())
		return n >= 3, fmt.Sprintf("%d ticks", n)
	})
	return ticks
}

// readBack runs the checker pod on volume, on node ("" leaves it to the
// scheduler), and checks that it reads back the blob with sha256 sum and
// every chunk of written (the checker may find more: a writer can write
// chunks after the last read of its log), then deletes the checker.
func readBack(t *testing.T, c *cluster.Cluster, ns, node, volume, sum string, written []tick) {
	t.Helper()
	checker := pod(ns, "checker", checkerScript, volume, false)
	if node != "" {
		checker = onNode(checker, node)
	}
	apply(t, c, checker)
	waitSucceeded(t, c, ns, "checker")
	if got := podSum(t, c, ns, "checker"); got != sum {
		t.Errorf("the blob reads back with sha256 %s, the writer wrote %s", got, sum)
	}
	read := parseTicks(t, logValues(t, c, ns, "checker", "tick"))
	if len(read) < len(written) {
		t.Errorf("the checker found %d chunks, the writer reported %d", len(read), len(written))
	}
	for i, w := range written {
		if i < len(read) && read[i].sum != w.sum {
			t.Errorf("chunk %d reads back with sha256 %s, the writer wrote %s", i, read[i].sum, w.sum)
		}
	}
	kubectl(t, c, "delete", "pod", "-n", ns, "checker", "--wait=true", "--timeout=3m")
}

// powerCutHealTimeout bounds the recovery from a power cut, most of which
// is the storage node's boot and its kubelet under emulation (176 s on an
// idle host, over 300 s on a busy one). It stays inside the examples'
// ctrlLossTimeoutSeconds (600): after that the worker's initiator gives
// up and the pod's I/O fails, which no recovery can undo.
const powerCutHealTimeout = 9 * time.Minute

// tick is one chunk the ticker wrote.
type tick struct {
	n    int
	sum  string
	unix int64 // 0 in the checker's lines
}

func parseTicks(t *testing.T, vals []string) []tick {
	t.Helper()
	return parseTicksFrom(t, vals, 0)
}

// parseTicksFrom parses the lines of a writer whose first chunk is first.
func parseTicksFrom(t *testing.T, vals []string, first int) []tick {
	t.Helper()
	var ts []tick
	for _, v := range vals {
		f := strings.Fields(v)
		if len(f) < 2 {
			t.Fatalf("tick line %q", v)
		}
		n, err := strconv.Atoi(f[0])
		if err != nil || n != first+len(ts) {
			t.Fatalf("tick line %q: want chunk %d", v, first+len(ts))
		}
		tk := tick{n: n, sum: f[1]}
		if len(f) > 2 {
			tk.unix, _ = strconv.ParseInt(f[2], 10, 64)
		}
		ts = append(ts, tk)
	}
	return ts
}

// longestGap is the longest time between two consecutive ticks.
func longestGap(ts []tick) time.Duration {
	var gap int64
	for i := 1; i < len(ts); i++ {
		gap = max(gap, ts[i].unix-ts[i-1].unix)
	}
	return time.Duration(gap) * time.Second
}

// controllerState is the kernel initiator's state of one controller
// (live, connecting, resetting, deleting…), or "gone".
func controllerState(ctrl string) string {
	b, err := os.ReadFile(filepath.Join("/sys/class/nvme", ctrl, "state"))
	if err != nil {
		return "gone"
	}
	return strings.TrimSpace(string(b))
}

// boundClaim creates the Filesystem, ReadWriteOnce claim "data" of size
// in ns from class, waits until it is Bound, and returns its PV, the
// volume ID and the volume's export identity.
func boundClaim(t *testing.T, c *cluster.Cluster, ns, class, size string) (pv, volumeID string, id export.Identity) {
	t.Helper()
	return boundClaimMode(t, c, ns, class, "Filesystem", size)
}

// boundClaimMode is boundClaim for the volume mode mode (Filesystem or
// Block).
func boundClaimMode(t *testing.T, c *cluster.Cluster, ns, class, mode, size string) (pv, volumeID string, id export.Identity) {
	t.Helper()
	apply(t, c, claim(ns, "data", class, mode, "ReadWriteOnce", size))
	wait(t, c, ns, "pvc/data", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	pv = kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}")
	volumeID = kubectl(t, c, "get", "pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}")
	id, err := export.For(volumeID)
	if err != nil {
		t.Fatalf("volume handle %q: %v", volumeID, err)
	}
	return pv, volumeID, id
}

// claim renders a PersistentVolumeClaim.
func claim(ns, name, class, mode, access, size string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s, namespace: %s}
spec:
  storageClassName: %s
  volumeMode: %s
  accessModes: [%s]
  resources: {requests: {storage: %s}}
`, name, ns, class, mode, access, size)
}

// pillarClass renders a PillarStorageClass of store and protocol; its
// fsType (ext4) and reclaimPolicy (Delete) are the CRD's defaults.
func pillarClass(name, store, protocol string) string {
	return fmt.Sprintf(`apiVersion: pillar-csi.io/v1alpha1
kind: PillarStorageClass
metadata: {name: %s}
spec: {storeName: %s, protocolName: %s}
`, name, store, protocol)
}
