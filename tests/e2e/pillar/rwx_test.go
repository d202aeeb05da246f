//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// rwxClass is a PillarStorageClass on the install's ZFS store that
// consents to writers on several nodes (docs/rwx-block.md).
const rwxClass = "zfs-nvmeof-rwx"

var rwxObjects = fmt.Sprintf(`apiVersion: pillar-csi.io/v1alpha1
kind: PillarStorageClass
metadata: {name: %s}
spec: {storeName: zfs-tank, protocolName: nvmeof-tcp, multiNodeBlockWriters: true}
`, rwxClass)

// applyRWXClass creates rwxClass, deleted when the test ends, and waits
// for the StorageClass the controller generates from it.
func applyRWXClass(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	apply(t, c, rwxObjects)
	t.Cleanup(func() {
		if out, err := c.Kubectl(context.Background(), nil, "delete", "pillarstorageclass", rwxClass, "--ignore-not-found", "--wait=false"); err != nil {
			t.Logf("delete PillarStorageClass %s: %v\n%s", rwxClass, err, out)
		}
	})
	poll(t, "StorageClass "+rwxClass, 2*time.Minute, time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "get", "storageclass", rwxClass, "-o", `jsonpath={.parameters.pillar-csi\.io/multi-node-block-writers}`)
		return err == nil && strings.TrimSpace(string(out)) == "true", fmt.Sprintf("%q %v", out, err)
	})
}

// migrateScript is one side of a live migration on a raw block volume
// (/dev/xvda), in the steps a hypervisor takes. It opens the volume and
// reads it once with O_DIRECT ("ready=": this node's I/O path works),
// then stands by until the test writes N to /tmp/go; it reads back chunks
// 0..N-1 with O_DIRECT ("read=<i> <sha256>") and writes chunk N, N+1, …
// of 64 KiB each with O_DIRECT and fsync ("tick=<i> <sha256> <unix>"),
// one a second, until the test creates /tmp/stop ("stopped=<next>"). It
// then keeps the volume open, as a paused source does until it is torn
// down. Any I/O error ends the script (set -e), and the pod with it.
const migrateScript = `set -e
dd if=/dev/xvda of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null; echo "ready=$(date +%s)"
while [ ! -e /tmp/go ]; do sleep 1; done; from=$(cat /tmp/go)
j=0; while [ $j -lt $from ]; do set -- $(dd if=/dev/xvda bs=64k skip=$j count=1 iflag=direct 2>/dev/null | sha256sum); echo "read=$j $1"; j=$((j+1)); done; echo "readdone=$from"
i=$from; while [ ! -e /tmp/stop ]; do dd if=/dev/urandom of=/tmp/c bs=64k count=1 2>/dev/null; dd if=/tmp/c of=/dev/xvda bs=64k seek=$i oflag=direct conv=fsync 2>/dev/null; set -- $(sha256sum /tmp/c); echo "tick=$i $1 $(date +%s)"; i=$((i+1)); sleep 1; done
echo "stopped=$i"; while :; do sleep 3600; done`

// TestReadWriteManyBlockMigration moves a writer between the two nodes of
// a two-guest cluster the way KubeVirt live-migrates a virtual machine's
// disk: a ReadWriteMany Block claim of a consenting class; a pod on one
// node writes a checksummed sequence; a pod on the other node opens the
// same claim while the first still writes (both VolumeAttachments
// attached, the volume's record holding both publications, the storage
// node allowing both hosts); the first stops; the second reads everything
// the first wrote with O_DIRECT and goes on writing; the first pod goes,
// its node's attachment and host with it, and the second keeps writing
// without an error. Then the same in the other direction. The hand-over
// figures (the new pod created → its attachment → its first read; the
// old writer stopped → the new one writing) are recorded. A Filesystem
// ReadWriteMany claim in the same class stays Pending with an event that
// says why.
func TestReadWriteManyBlockMigration(t *testing.T) {
	c := setup(t)
	if c.PeerName == "" {
		t.Skip("needs a second node: a two-guest run (make e2e-two)")
	}
	ctx := context.Background()
	applyRWXClass(t, c)
	ns := testNamespace(t, c)

	t.Run("filesystem-refused", func(t *testing.T) {
		apply(t, c, claim(ns, "fs", rwxClass, "Filesystem", "ReadWriteMany", "64Mi"))
		var msg string
		poll(t, "a ProvisioningFailed event on the Filesystem claim", 3*time.Minute, 2*time.Second, func() (bool, string) {
			out, err := c.Kubectl(ctx, nil, "get", "events", "-n", ns, "--field-selector", "involvedObject.name=fs,reason=ProvisioningFailed", "-o", "jsonpath={.items[*].message}")
			msg = string(out)
			return err == nil && msg != "", fmt.Sprintf("%q %v", out, err)
		})
		t.Logf("ProvisioningFailed: %s", msg)
		if !strings.Contains(msg, "InvalidArgument") || !strings.Contains(msg, "corrupt") {
			t.Errorf("the event says %q, want InvalidArgument and why a filesystem on two nodes corrupts", msg)
		}
		if phase := kubectl(t, c, "get", "pvc", "-n", ns, "fs", "-o", "jsonpath={.status.phase}"); phase != "Pending" {
			t.Errorf("the Filesystem ReadWriteMany claim is %s, want Pending", phase)
		}
		kubectl(t, c, "delete", "pvc", "-n", ns, "fs", "--wait=true", "--timeout=2m")
	})

	apply(t, c, claim(ns, "data", rwxClass, "Block", "ReadWriteMany", "256Mi"))
	wait(t, c, ns, "pvc/data", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	pv := kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}")
	volumeID := kubectl(t, c, "get", "pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}")
	m := &migration{t: t, c: c, ns: ns, pv: pv, volumeID: volumeID, written: map[int]string{}}

	m.start("vm-1", c.NodeName)
	m.goOn("vm-1", 0)
	m.waitTicks("vm-1", 5)
	m.handOver("vm-1", c.NodeName, "vm-2", c.PeerName)
	m.handOver("vm-2", c.PeerName, "vm-3", c.NodeName)
	m.stopWriting("vm-3")
	kubectl(t, c, "delete", "pod", "-n", ns, "vm-3", "--wait=true", "--timeout=3m")
	attachmentsGone(t, c, pv)
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, "ReadWriteMany migration")
}

// migration is the state of TestReadWriteManyBlockMigration: what every
// writer so far wrote, chunk by chunk.
type migration struct {
	t        *testing.T
	c        *cluster.Cluster
	ns, pv   string
	volumeID string
	written  map[int]string // chunk → sha256
	next     int            // the chunk the next writer starts at
	// How long after the last start's pod was created its node's
	// attachment was attached and the pod first read the volume.
	lastAttached, lastReady time.Duration
}

// start creates a migrateScript pod on node and waits until it has read
// the volume once; it records how long that took and when the node's
// VolumeAttachment was attached.
func (m *migration) start(name, node string) {
	t, c := m.t, m.c
	t.Helper()
	manifest := onNode(pod(m.ns, name, migrateScript, "persistentVolumeClaim: {claimName: data}", true), node)
	t0 := time.Now()
	apply(t, c, manifest)
	var attached time.Duration
	poll(t, name+" ready on "+node, 5*time.Minute, time.Second, func() (bool, string) {
		if attached == 0 && m.attachedOn(node) {
			attached = time.Since(t0)
		}
		if p := m.phase(name); !strings.HasPrefix(p, "Running") {
			return false, fmt.Sprintf("attached after %v, pod %s", attached, p)
		}
		ready := logValues(t, c, m.ns, name, "ready")
		return len(ready) > 0, fmt.Sprintf("attached after %v, ready %v", attached, ready)
	})
	if attached == 0 {
		attached = time.Since(t0)
	}
	m.lastAttached, m.lastReady = attached, time.Since(t0)
	t.Logf("%s on %s: attached %.1fs and first read %.1fs after its pod was created", name, node, attached.Seconds(), m.lastReady.Seconds())
}

// attachedOn reports whether the volume's VolumeAttachment for node says
// attached.
func (m *migration) attachedOn(node string) bool {
	out, err := m.c.Kubectl(context.Background(), nil, "get", "volumeattachment", "-o",
		fmt.Sprintf(`jsonpath={range .items[?(@.spec.source.persistentVolumeName=="%s")]}{.spec.nodeName}={.status.attached}{"\n"}{end}`, m.pv))
	return err == nil && strings.Contains(string(out), node+"=true")
}

// goOn lets name's pod read back chunks 0..from-1 and write on from
// chunk from; it checks what it read against what was written.
func (m *migration) goOn(name string, from int) {
	t, c := m.t, m.c
	t.Helper()
	kubectl(t, c, "exec", "-n", m.ns, name, "--", "sh", "-c", fmt.Sprintf("echo %d > /tmp/go", from))
	poll(t, name+" reading back "+strconv.Itoa(from)+" chunks", 5*time.Minute, time.Second, func() (bool, string) {
		done := logValues(t, c, m.ns, name, "readdone")
		return len(done) > 0, fmt.Sprintf("readdone %v", done)
	})
	read := parseTicks(t, logValues(t, c, m.ns, name, "read"))
	if len(read) != from {
		t.Errorf("%s read back %d chunks, %d were written", name, len(read), from)
	}
	for _, r := range read {
		if want := m.written[r.n]; r.sum != want {
			t.Errorf("%s reads chunk %d with sha256 %s, it was written with %s", name, r.n, r.sum, want)
		}
	}
}

// waitTicks waits until name has written n chunks of its own.
func (m *migration) waitTicks(name string, n int) {
	m.t.Helper()
	poll(m.t, fmt.Sprintf("%d chunks written by %s", n, name), 3*time.Minute, 2*time.Second, func() (bool, string) {
		got := len(logValues(m.t, m.c, m.ns, name, "tick"))
		return got >= n, fmt.Sprintf("%d chunks, pod %s", got, m.phase(name))
	})
}

func (m *migration) phase(name string) string {
	out, _ := m.c.Kubectl(context.Background(), nil, "get", "pod", "-n", m.ns, name, "-o", "jsonpath={.status.phase} restarts={.status.containerStatuses[0].restartCount}")
	return strings.TrimSpace(string(out))
}

// stopWriting stops name's writes and records every chunk it wrote.
func (m *migration) stopWriting(name string) {
	t, c := m.t, m.c
	t.Helper()
	kubectl(t, c, "exec", "-n", m.ns, name, "--", "touch", "/tmp/stop")
	var stopped []string
	poll(t, name+" stopped", 2*time.Minute, time.Second, func() (bool, string) {
		stopped = logValues(t, c, m.ns, name, "stopped")
		return len(stopped) > 0, m.phase(name)
	})
	ticks := parseTicksFrom(t, logValues(t, c, m.ns, name, "tick"), m.next)
	for _, tk := range ticks {
		m.written[tk.n] = tk.sum
	}
	next, err := strconv.Atoi(stopped[0])
	if err != nil || next != m.next+len(ticks) {
		t.Fatalf("%s stopped at %q after %d chunks from %d", name, stopped[0], len(ticks), m.next)
	}
	m.next = next
	if gap := longestGap(ticks); gap > 0 {
		t.Logf("%s wrote chunks %d..%d, the longest gap between two %v", name, ticks[0].n, next-1, gap)
	}
}

// handOver moves the writer from pod from on node fromNode to a new pod
// to on toNode, as a live migration does, and checks each step.
func (m *migration) handOver(from, fromNode, to, toNode string) {
	t, c := m.t, m.c
	t.Helper()
	// The target opens the volume while the source still writes.
	m.start(to, toNode)
	if !m.attachedOn(fromNode) || !m.attachedOn(toNode) {
		logKubectl(t, c, "get", "volumeattachment", "-o", "wide")
		t.Fatalf("while both pods run the volume is not attached to both %s and %s", fromNode, toNode)
	}
	pubs := kubectl(t, c, "get", "pillarvolumestate", m.volumeID, "-o", "jsonpath={.spec.publications[*].nodeID}")
	for _, n := range []string{fromNode, toNode} {
		if !strings.Contains(pubs, n+"/") {
			t.Errorf("PillarVolumeState %s records publications %q, want one for %s", m.volumeID, pubs, n)
		}
		if ok, err := storageHas(context.Background(), c, m.allowed(n)); err != nil || !ok {
			t.Errorf("the host of %s is not on the export's allowed_hosts while both pods run (%v)", n, err)
		}
	}
	n := len(logValues(t, c, m.ns, from, "tick"))
	m.waitTicks(from, n+2) // the source wrote on after the target attached
	record(t, "RWX hand-over: target pod created → attached", m.lastAttached)
	record(t, "RWX hand-over: target pod created → first read", m.lastReady)

	// The source stops; the target reads everything and goes on.
	t1 := time.Now()
	m.stopWriting(from)
	m.goOn(to, m.next)
	m.waitTicks(to, 1)
	record(t, "RWX hand-over: source stopped → target read all, wrote", time.Since(t1))

	// The source goes: its node's attachment and host with it; the
	// target keeps writing.
	n = len(logValues(t, c, m.ns, to, "tick"))
	kubectl(t, c, "delete", "pod", "-n", m.ns, from, "--wait=true", "--timeout=3m")
	poll(t, "the attachment of "+fromNode+" gone", 3*time.Minute, time.Second, func() (bool, string) {
		return !m.attachedOn(fromNode), "attached"
	})
	if ok, err := storageHas(context.Background(), c, m.allowed(fromNode)); err != nil || ok {
		t.Errorf("the host of %s is still on the export's allowed_hosts after its pod went (%v)", fromNode, err)
	}
	m.waitTicks(to, n+3)
	if p := m.phase(to); p != "Running restarts=0" {
		t.Errorf("%s after the source went: %s, want Running without a restart", to, p)
	}
	t.Logf("%s on %s went on writing while %s's attachment and host went", to, toNode, fromNode)
}

// allowed is the path of node's host under the export's allowed_hosts on
// the storage node.
func (m *migration) allowed(node string) string {
	m.t.Helper()
	id, err := export.For(m.volumeID)
	if err != nil {
		m.t.Fatal(err)
	}
	return filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN, "allowed_hosts", hostNQN(m.t, m.c, node))
}
