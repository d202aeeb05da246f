//go:build kernel

package pillar_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// snapshotBackends selects TestSnapshots' backends; make e2e runs both.
var snapshotBackends = flag.String("snapshot.backends", "zfs,lvm-thin", "backends of TestSnapshots, comma-separated: zfs, lvm-thin")

// The snapshot class the chart makes where the cluster serves the snapshot
// API (the lab applies the snapshot CRDs before the install).
const snapshotClass = "pillar-csi"

// TestSnapshots is what a user does with snapshots and clones, with the
// chart's csi-snapshotter, its VolumeSnapshotClass and the snapshot
// controller: a pod writes a file, a VolumeSnapshot is taken, the pod
// writes a second file; a claim restored from the snapshot (and larger
// than it) reads the first file alone, on a filesystem grown to its size;
// a claim cloned from the live claim reads both. Then the source claim is
// deleted first and both still read; the snapshot goes next, then the
// rest, and nothing is left on the storage node.
func TestSnapshots(t *testing.T) {
	c := setup(t)
	want := strings.Split(*snapshotBackends, ",")
	for _, sc := range []struct {
		name, class, size, larger string
		list                      func(context.Context) (string, error)
	}{
		{name: "zfs", class: "zfs-nvmeof", size: "256Mi", larger: "384Mi", list: zfsAll},
		// mkfs.xfs refuses filesystems under 300 MB.
		{name: "lvm-thin", class: "lvm-nvmeof-xfs", size: "320Mi", larger: "448Mi", list: lvAll},
	} {
		if slices.Contains(want, sc.name) {
			t.Run(sc.name, func(t *testing.T) { testSnapshots(t, c, sc.class, sc.size, sc.larger, sc.list) })
		}
	}
	t.Logf("figures of the run so far:\n%s", summary())
}

// The snapshot test's pods: the first writes a, the second b; the reader
// prints the checksum of each file it finds ("a=<hex>", "b=<hex>", or
// "b=absent") and the filesystem's total bytes ("size=").
const (
	writeAScript = `set -e; dd if=/dev/urandom of=/data/a bs=1M count=$MIB 2>/dev/null; sync; set -- $(sha256sum /data/a); echo "a=$1"`
	writeBScript = `set -e; dd if=/dev/urandom of=/data/b bs=1M count=$MIB 2>/dev/null; sync; set -- $(sha256sum /data/b); echo "b=$1"`
	readABScript = `set -e; for f in a b; do if [ -e /data/$f ]; then set -- $(sha256sum /data/$f); echo "$f=$1"; else echo "$f=absent"; fi; done
df -k /data | while read -r fs kb rest; do if [ "$fs" != Filesystem ]; then echo "size=$((kb * 1024))"; fi; done`
)

func testSnapshots(t *testing.T, c *cluster.Cluster, class, size, larger string, list func(context.Context) (string, error)) {
	ns := testNamespace(t, c)
	ctx := context.Background()
	vol := func(claim string) string { return "persistentVolumeClaim: {claimName: " + claim + "}" }
	// run runs a pod to its end and returns what it logged of keys. The
	// pod is deleted then: a pod that ended still holds its claim for the
	// PVC protection controller, so the claim could not be deleted.
	run := func(name, script, claim string, keys ...string) map[string]string {
		t.Helper()
		apply(t, c, pod(ns, name, script, vol(claim), false))
		waitSucceeded(t, c, ns, name)
		got := map[string]string{}
		for _, k := range keys {
			v := logValues(t, c, ns, name, k)
			if len(v) != 1 {
				t.Fatalf("pod %s logged %s=%v, want one value", name, k, v)
			}
			got[k] = v[0]
		}
		kubectl(t, c, "delete", "pod", "-n", ns, name, "--wait=true", "--timeout=3m")
		return got
	}

	apply(t, c, claim(ns, "data", class, "Filesystem", "ReadWriteOnce", size))
	wait(t, c, ns, "pvc/data", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	source := kubectl(t, c, "get", "pv", kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}"), "-o", "jsonpath={.spec.csi.volumeHandle}")
	sumA := run("write-a", writeAScript, "data", "a")["a"]

	t0 := time.Now()
	apply(t, c, fmt.Sprintf(`apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: snap, namespace: %s}
spec:
  volumeSnapshotClassName: %s
  source: {persistentVolumeClaimName: data}
`, ns, snapshotClass))
	wait(t, c, ns, "volumesnapshot/snap", "jsonpath={.status.readyToUse}=true", 5*time.Minute)
	record(t, class+": VolumeSnapshot ready", time.Since(t0))
	content := kubectl(t, c, "get", "volumesnapshot", "-n", ns, "snap", "-o", "jsonpath={.status.boundVolumeSnapshotContentName}")
	handle := kubectl(t, c, "get", "volumesnapshotcontent", content, "-o", "jsonpath={.status.snapshotHandle}")
	logKubectl(t, c, "get", "pillarsnapshotstate", handle, "-o", "wide")
	if got := kubectl(t, c, "get", "pillarsnapshotstate", handle, "-o", "jsonpath={.spec.sourceVolumeID} {.status.readyToUse} {.metadata.annotations.pillar-csi\\.io/volumesnapshot-name}"); got != source+" true snap" {
		t.Errorf("PillarSnapshotState %s: source, ready, VolumeSnapshot = %q, want %q", handle, got, source+" true snap")
	}
	restoreSize := kubectl(t, c, "get", "volumesnapshot", "-n", ns, "snap", "-o", "jsonpath={.status.restoreSize}")
	if q, err := resource.ParseQuantity(restoreSize); err != nil || q.Cmp(resource.MustParse(size)) != 0 {
		t.Errorf("the snapshot's restoreSize is %q, want the claim's %s", restoreSize, size)
	}
	sumB := run("write-b", writeBScript, "data", "b")["b"]

	// A restore, larger than the snapshot, and a clone of the live claim.
	t1 := time.Now()
	apply(t, c, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: restored, namespace: %[1]s}
spec:
  storageClassName: %[2]s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: %[3]s}}
  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: snap}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: clone, namespace: %[1]s}
spec:
  storageClassName: %[2]s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: %[4]s}}
  dataSource: {kind: PersistentVolumeClaim, name: data}
`, ns, class, larger, size))
	wait(t, c, ns, "pvc/restored", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	wait(t, c, ns, "pvc/clone", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	record(t, class+": restore and clone Bound", time.Since(t1))
	check := func(pod, claim, wantB string, minBytes int64) {
		t.Helper()
		got := run(pod, readABScript, claim, "a", "b", "size")
		if got["a"] != sumA || got["b"] != wantB {
			t.Errorf("%s reads a=%s b=%s, want a=%s b=%s", claim, got["a"], got["b"], sumA, wantB)
		}
		n, err := strconv.ParseInt(got["size"], 10, 64)
		if err != nil || n < minBytes {
			t.Errorf("%s's filesystem holds %d bytes (%v), want at least %d", claim, n, err, minBytes)
		}
	}
	// A filesystem's usable size is its device's less its metadata; the
	// restored one must have grown past the snapshot's device.
	small, big := resource.MustParse(size), resource.MustParse(larger)
	check("read-restored", "restored", "absent", small.Value())
	check("read-clone", "clone", sumB, small.Value()*3/4)
	restoredSize := kubectl(t, c, "get", "pvc", "-n", ns, "restored", "-o", "jsonpath={.status.capacity.storage}")
	if q, err := resource.ParseQuantity(restoredSize); err != nil || q.Cmp(big) < 0 {
		t.Errorf("the restored claim's capacity is %q, want %s", restoredSize, larger)
	}

	// The source claim goes first; what was made from it stays readable.
	pv := kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}")
	kubectl(t, c, "delete", "pvc", "-n", ns, "data", "--wait=true", "--timeout=3m")
	wait(t, c, "", "pv/"+pv, "delete", 12*time.Minute)
	check("reread-restored", "restored", "absent", small.Value())
	check("reread-clone", "clone", sumB, small.Value()*3/4)

	// Then the snapshot, then the rest: nothing is left on the node.
	kubectl(t, c, "delete", "volumesnapshot", "-n", ns, "snap", "--wait=true", "--timeout=3m")
	wait(t, c, "", "volumesnapshotcontent/"+content, "delete", 5*time.Minute)
	poll(t, "PillarSnapshotState "+handle+" gone", 2*time.Minute, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "pillarsnapshotstate", handle, "--ignore-not-found", "-o", "name")
		return err == nil && strings.TrimSpace(string(out)) == "", fmt.Sprintf("%s %v", out, err)
	})
	var ids []string
	for _, claim := range []string{"restored", "clone"} {
		pv := kubectl(t, c, "get", "pvc", "-n", ns, claim, "-o", "jsonpath={.spec.volumeName}")
		ids = append(ids, kubectl(t, c, "get", "pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}"))
		kubectl(t, c, "delete", "pvc", "-n", ns, claim, "--wait=true", "--timeout=3m")
		wait(t, c, "", "pv/"+pv, "delete", 12*time.Minute)
	}
	left, err := list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append(ids, source, handle) {
		if strings.Contains(left, id) {
			t.Errorf("%s is still on the storage node:\n%s", id, left)
		}
	}
	t.Logf("snapshot, restore and clone deleted in the order source, snapshot, copies; the storage node keeps none of %v", append(ids, source, handle))
}

// zfsAll is every dataset, zvol and snapshot of the storage node's pool,
// hidden ones (a deleted snapshot kept for a clone) included.
func zfsAll(ctx context.Context) (string, error) {
	return onStorage(ctx, lab.c, "list datasets", "zfs", "list", "-H", "-o", "name", "-t", "all", "-r", deploy.ZPool)
}

// lvAll is every logical volume of the storage node's volume group, with
// its tags, hidden (activation-skipped) snapshots included.
func lvAll(ctx context.Context) (string, error) {
	return onStorage(ctx, lab.c, "lvs", "lvm", "lvs", "--config", fixture.LVMConfig, "--noheadings", "-a", "-o", "lv_name,lv_tags", deploy.VG)
}
