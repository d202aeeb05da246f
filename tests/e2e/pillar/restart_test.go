//go:build kernel

package pillar_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// The restart test's pod scripts. The ticker writes a blob, then one
// chunk a second, each fsynced, and logs "tick=<n> <sha256> <unix time>"
// for every chunk that reached the volume; the checker prints the same
// line for every chunk file it finds, so the two logs compare directly.
const (
	tickerScript = `set -e; dd if=/dev/urandom of=/data/blob bs=1M count=$MIB 2>/dev/null; sync; set -- $(sha256sum /data/blob); echo "sum=$1"
i=0; while :; do dd if=/dev/urandom of=/data/chunk.$i bs=64k count=1 conv=fsync 2>/dev/null; set -- $(sha256sum /data/chunk.$i); echo "tick=$i $1 $(date +%s)"; i=$((i+1)); sleep 1; done`
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
// survive: what a real reboot adds (the pool imported again, the kernel's
// nvmet state all gone) is proven on the storage node alone by the kernel
// lab's TestCSIStorageNodeReboot and the agent suite.
func TestStorageNodeRestart(t *testing.T) {
	c := setup(t)
	ns := testNamespace(t, c)
	apply(t, c, claim(ns, "data", "zfs-nvmeof", "Filesystem", "ReadWriteOnce", "256Mi"))
	wait(t, c, ns, "pvc/data", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	pv := kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}")
	volumeID := kubectl(t, c, "get", "pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}")
	id, err := export.For(volumeID)
	if err != nil {
		t.Fatalf("volume handle %q: %v", volumeID, err)
	}
	volume := "persistentVolumeClaim: {claimName: data}"
	apply(t, c, pod(ns, "ticker", tickerScript, volume, false))
	wait(t, c, ns, "pod/ticker", "condition=Ready", 5*time.Minute)
	ticks := func() []tick { return parseTicks(t, logValues(t, c, ns, "ticker", "tick")) }
	poll(t, "three ticks of the writer", 3*time.Minute, 2*time.Second, func() (bool, string) {
		n := len(ticks())
		return n >= 3, fmt.Sprintf("%d ticks", n)
	})
	ctrls := fixture.Controllers(t, id.SubsystemNQN)
	if len(ctrls) != 1 {
		t.Fatalf("initiator controllers of %s: %v, want one", id.SubsystemNQN, ctrls)
	}
	ctrl := ctrls[0]
	agentPod := kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "jsonpath={.items[0].metadata.name}")
	before := len(ticks())
	t.Logf("before the restart: %d ticks written; initiator %s is %s; agent pod %s", before, ctrl, controllerState(ctrl), agentPod)

	t0 := time.Now()
	fixture.WipeExport(t, id.SubsystemNQN)
	kubectl(t, c, "delete", "pod", "-n", deploy.Namespace, agentPod, "--grace-period=0", "--force", "--wait=false")
	t.Logf("export wiped from configfs and agent pod %s force-deleted", agentPod)

	subsys := filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN)
	var exported, live time.Duration
	states := []string{controllerState(ctrl)}
	poll(t, "the export back in configfs and the initiator live", healTimeout, 500*time.Millisecond, func() (bool, string) {
		if s := controllerState(ctrl); s != states[len(states)-1] {
			states = append(states, s)
		}
		if exported == 0 {
			if _, err := os.Stat(subsys); err == nil {
				exported = time.Since(t0)
			}
		}
		if exported != 0 && live == 0 && states[len(states)-1] == "live" && len(states) > 1 {
			live = time.Since(t0)
		}
		return exported != 0 && live != 0, fmt.Sprintf("exported after %v, controller states %v", exported, states)
	})
	t.Logf("initiator %s: %s", ctrl, strings.Join(states, " → "))
	record(t, "storage-node restart: export back", exported)
	record(t, "storage-node restart: initiator live", live)
	logKubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "wide")
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
		return resumed != 0, fmt.Sprintf("%d ticks (%d before the restart)", n, before)
	})
	record(t, "storage-node restart: writes resumed", resumed)
	written := ticks()
	t.Logf("the writer's longest pause between two chunks: %v", longestGap(written))
	sum := podSum(t, c, ns, "ticker")
	kubectl(t, c, "delete", "pod", "-n", ns, "ticker", "--wait=true", "--timeout=3m")
	// The writer may have written chunks after the last read of its log:
	// the checker must find at least every chunk seen here.

	apply(t, c, pod(ns, "checker", checkerScript, volume, false))
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
	t.Logf("a new pod read back the blob and all %d chunks (%d written before the restart)", len(written), before)
	kubectl(t, c, "delete", "pod", "-n", ns, "checker", "--wait=true", "--timeout=3m")
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, "storage-node restart")
}

// healTimeout bounds a storage-node restart's recovery: the DaemonSet's
// new agent pod, the controller noticing the new instance, the push, and
// the initiator's next reconnect attempt (every reconnectDelaySeconds of
// the PillarProtocol, 10 s in the examples).
const healTimeout = 5 * time.Minute

// tick is one chunk the ticker wrote.
type tick struct {
	n    int
	sum  string
	unix int64 // 0 in the checker's lines
}

func parseTicks(t *testing.T, vals []string) []tick {
	t.Helper()
	var ts []tick
	for _, v := range vals {
		f := strings.Fields(v)
		if len(f) < 2 {
			t.Fatalf("tick line %q", v)
		}
		n, err := strconv.Atoi(f[0])
		if err != nil || n != len(ts) {
			t.Fatalf("tick line %q: want chunk %d", v, len(ts))
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
