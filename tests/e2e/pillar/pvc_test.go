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

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// The suite's pods run the harness's busybox image: a shell, dd,
// sha256sum, df and blockdev (as `busybox blockdev`) in 2 MB, built from
// the host's busybox-static with no registry. pillar-node's image has a
// shell but no coreutils, and a program of our own would only re-implement
// these.
const podImage = cluster.BusyboxImage

const baselineFigure = "hostPath pod Running"

// dataMiB is what each pod writes: enough to cross several extents and
// records, little enough for the guest's tmpfs-backed pools.
const dataMiB = 16

// TestHostPathBaseline measures what the cluster itself costs: a pod with
// a hostPath volume, created → Running, with the same kubectl wait the
// volume tests use.
func TestHostPathBaseline(t *testing.T) {
	c := clusterOnly(t)
	ns := testNamespace(t, c)
	dir, err := os.MkdirTemp("", "pillar-e2e-hostpath-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t0 := time.Now()
	apply(t, c, pod(ns, "hostpath", writeFileScript, fmt.Sprintf("hostPath: {path: %s, type: Directory}", dir), false))
	wait(t, c, ns, "pod/hostpath", "condition=Ready", 5*time.Minute)
	record(t, baselineFigure, time.Since(t0))
	sum := podSum(t, c, ns, "hostpath")
	if got := fileSum(t, filepath.Join(dir, "blob")); got != sum {
		t.Fatalf("the node reads sha256 %s from the hostPath, the pod wrote %s", got, sum)
	}
	kubectl(t, c, "delete", "pod", "-n", ns, "hostpath", "--wait=true", "--timeout=3m")
}

// volumeCase is one kind of claim the suite binds, writes, reads back,
// expands and deletes.
type volumeCase struct {
	name       string
	class      string
	block      bool
	accessMode string
	fsType     string // what must be mounted; "" for Block
	size, grow string
	// backend says whether the volume's backend object (zvol or LV) with
	// this ID exists on the storage node.
	backend func(ctx context.Context, volumeID string) (bool, error)
}

// TestVolumes: for ext4 on a zvol, xfs on a thin LV and a raw block thin
// LV, a claim against the generated StorageClass binds; a pod writes data
// and its checksum; the claim grows online and the pod sees the new size;
// the pod is deleted and a new one reads the same checksum; the claim is
// deleted and the backend volume, the nvmet subsystem, the initiator's
// controller and the PillarVolumeState are all gone.
func TestVolumes(t *testing.T) {
	c := setup(t)
	for _, vc := range []volumeCase{
		{name: "ext4-zfs", class: "zfs-nvmeof", accessMode: "ReadWriteOnce", fsType: "ext4", size: "256Mi", grow: "384Mi", backend: zvolExists},
		// mkfs.xfs refuses filesystems under 300 MB.
		{name: "xfs-lvm", class: "lvm-nvmeof-xfs", accessMode: "ReadWriteOnce", fsType: "xfs", size: "320Mi", grow: "448Mi", backend: lvExists},
		{name: "block-lvm", class: "lvm-nvmeof-xfs", block: true, accessMode: "ReadWriteOncePod", size: "128Mi", grow: "192Mi", backend: lvExists},
	} {
		t.Run(vc.name, func(t *testing.T) { testVolume(t, c, vc) })
	}
	t.Logf("figures of the run so far:\n%s", summary())
}

func testVolume(t *testing.T, c *cluster.Cluster, vc volumeCase) {
	ns := testNamespace(t, c)
	ctx := context.Background()
	mode := "Filesystem"
	if vc.block {
		mode = "Block"
	}
	t0 := time.Now()
	apply(t, c, claim(ns, "data", vc.class, mode, vc.accessMode, vc.size))
	wait(t, c, ns, "pvc/data", "jsonpath={.status.phase}=Bound", 5*time.Minute)
	record(t, vc.name+": PVC Bound", time.Since(t0))
	logKubectl(t, c, "describe", "pvc", "-n", ns, "data")
	pv := kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}")
	volumeID := kubectl(t, c, "get", "pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}")
	logKubectl(t, c, "get", "pv", pv, "-o", "wide")
	logKubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", "wide")
	id, err := export.For(volumeID)
	if err != nil {
		t.Fatalf("volume handle %q: %v", volumeID, err)
	}
	subsys := filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN)
	if ok, err := vc.backend(ctx, volumeID); err != nil || !ok {
		t.Fatalf("the backend volume of %s is not on the storage node (%v)", volumeID, err)
	}
	if ok, err := storageHas(ctx, c, subsys); err != nil || !ok {
		t.Fatalf("the volume's nvmet subsystem %s is not in the storage node's configfs (%v)", id.SubsystemNQN, err)
	}

	// The writer stays up so that the claim can grow under it.
	volume := "persistentVolumeClaim: {claimName: data}"
	writer, reader := writeFileScript, readFileScript
	if vc.block {
		writer, reader = writeBlockScript, readBlockScript
	}
	t1 := time.Now()
	apply(t, c, pod(ns, "writer", writer, volume, vc.block))
	wait(t, c, ns, "pod/writer", "condition=Ready", 5*time.Minute)
	record(t, vc.name+": pod Running", time.Since(t1))
	sum := podSum(t, c, ns, "writer")
	t.Logf("the writer wrote %d MiB, sha256 %s", dataMiB, sum)
	if !vc.block {
		// kubectl exec runs in the writer's container, /data and all.
		f := strings.Fields(kubectl(t, c, "exec", "-n", ns, "writer", "--", "sha256sum", "/data/blob") + " ")
		if f[0] != sum {
			t.Errorf("kubectl exec sha256sum /data/blob in the writer = %q, the writer logged %s", f[0], sum)
		}
	}
	if !vc.block {
		var mnt string
		poll(t, "the writer's /data mount", time.Minute, time.Second, func() (bool, string) {
			if m := logValues(t, c, ns, "writer", "mount"); len(m) > 0 {
				mnt = m[0]
				return true, ""
			}
			return false, "no mount= line yet"
		})
		if f := strings.Fields(mnt); len(f) < 3 || f[2] != vc.fsType {
			t.Errorf("the pod's /data is %q, want a %s mount", mnt, vc.fsType)
		} else {
			t.Logf("the pod's /data: %s", mnt)
		}
	}
	logKubectl(t, c, "get", "volumeattachment", "-o", "wide")
	logKubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", "wide")

	// Online expansion: the request grows while the writer has the volume
	// mounted (or open), and the pod sees the size without a restart.
	before := podSize(t, c, ns, "writer", func(int64) bool { return true })
	t2 := time.Now()
	kubectl(t, c, "patch", "pvc", "-n", ns, "data", "--type=merge", "-p", fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, vc.grow))
	want := resource.MustParse(vc.grow)
	poll(t, "PVC capacity "+vc.grow, 5*time.Minute, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.status.capacity.storage} {.status.conditions}")
		if err != nil {
			return false, err.Error()
		}
		f := strings.Fields(string(out))
		if len(f) == 0 {
			return false, string(out)
		}
		q, err := resource.ParseQuantity(f[0])
		return err == nil && q.Cmp(want) >= 0, string(out)
	})
	// A filesystem's usable size is less than its device by its metadata;
	// it must have grown by most of the added bytes.
	orig := resource.MustParse(vc.size)
	added := want.Value() - orig.Value()
	grown := podSize(t, c, ns, "writer", func(n int64) bool {
		if vc.block {
			return n == want.Value()
		}
		return n-before >= added*3/4
	})
	record(t, vc.name+": online expansion", time.Since(t2))
	t.Logf("the pod sees %d bytes before and %d after the expansion to %s", before, grown, vc.grow)
	logKubectl(t, c, "describe", "pvc", "-n", ns, "data")

	kubectl(t, c, "delete", "pod", "-n", ns, "writer", "--wait=true", "--timeout=3m")
	apply(t, c, pod(ns, "reader", reader, volume, vc.block))
	waitSucceeded(t, c, ns, "reader")
	if got := podSum(t, c, ns, "reader"); got != sum {
		t.Fatalf("a new pod reads sha256 %s, the writer wrote %s", got, sum)
	}
	t.Logf("a new pod read the same %d MiB back (sha256 %s)", dataMiB, sum)
	kubectl(t, c, "delete", "pod", "-n", ns, "reader", "--wait=true", "--timeout=3m")

	deleteClaim(t, c, ns, pv, volumeID, vc.backend, vc.name)
}

// deleteClaim deletes the claim "data" of ns and waits until, through the
// PV's reclaimPolicy Delete and DeleteVolume, everything the driver made
// for it is gone: the PV, the PillarVolumeState, the backend volume
// (backend says whether it exists), the nvmet subsystem, the initiator's
// controller and the VolumeAttachment. The time to the PV's deletion is
// recorded under the name what.
func deleteClaim(t *testing.T, c *cluster.Cluster, ns, pv, volumeID string, backend func(context.Context, string) (bool, error), what string) {
	t.Helper()
	t0 := time.Now()
	kubectl(t, c, "delete", "pvc", "-n", ns, "data", "--wait=true", "--timeout=3m")
	volumeGone(t, c, pv, volumeID, backend, what, t0)
}

// volumeGone waits for the PersistentVolume pv of a deleted claim and the
// PillarVolumeState of its volume to go, then checks that the backend
// volume, the nvmet subsystem, the initiator's controller and the
// VolumeAttachment went with them. The time from t0 to the PV's end is
// recorded under what.
func volumeGone(t *testing.T, c *cluster.Cluster, pv, volumeID string, backend func(context.Context, string) (bool, error), what string, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	id, err := export.For(volumeID)
	if err != nil {
		t.Fatalf("volume handle %q: %v", volumeID, err)
	}
	subsys := filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN)
	// Deletion waits for the detach, which goes through csi-attacher's
	// ControllerUnpublish; in a guest whose sidecars restart under load
	// (the attacher exits when its 1-second capability check times out,
	// every sidecar when it loses its lease) that took 7 minutes once.
	wait(t, c, "", "pv/"+pv, "delete", 12*time.Minute)
	record(t, what+": PVC deleted → PV gone", time.Since(t0))
	poll(t, "PillarVolumeState "+volumeID+" gone", 2*time.Minute, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "pillarvolumestate", volumeID, "--ignore-not-found", "-o", "name")
		return err == nil && strings.TrimSpace(string(out)) == "", fmt.Sprintf("%s %v", out, err)
	})
	if ok, err := backend(ctx, volumeID); err != nil || ok {
		t.Errorf("the backend volume of %s is still on the storage node (%v)", volumeID, err)
	}
	if ok, err := storageHas(ctx, c, subsys); err != nil || ok {
		t.Errorf("the nvmet subsystem %s is still in the storage node's configfs (%v)", id.SubsystemNQN, err)
	}
	if ctrls := fixture.Controllers(t, id.SubsystemNQN); len(ctrls) > 0 {
		t.Errorf("the node is still connected to %s: %v", id.SubsystemNQN, ctrls)
	}
	out, _ := c.Kubectl(ctx, nil, "get", "volumeattachment", "-o", "jsonpath={.items[*].spec.source.persistentVolumeName}")
	if strings.Contains(string(out), pv) {
		t.Errorf("a VolumeAttachment of %s is left: %s", pv, out)
	}
	t.Logf("PVC deleted: zvol/LV, nvmet subsystem, initiator controller and PillarVolumeState of %s are gone", volumeID)
}

// The pods' scripts ($MIB is dataMiB). Each prints the checksum as one
// "sum=<hex>" line (dd's statistics go to /dev/null). The writers then
// print what they see: their /data mount ("mount=<dev> <dir> <type>") and, every 2 s, the size
// of the volume ("size=<bytes>"), which the expansion check reads. The
// pod reports these itself so that what it saw is in its log, read by
// the test and kept for the record.
const (
	writeFileScript = `set -e; dd if=/dev/urandom of=/data/blob bs=1M count=$MIB 2>/dev/null; sync; set -- $(sha256sum /data/blob); echo "sum=$1"
while read -r dev dir fs rest; do if [ "$dir" = /data ]; then echo "mount=$dev $dir $fs"; fi; done < /proc/mounts
while :; do df -k /data | while read -r fs kb rest; do if [ "$fs" != Filesystem ]; then echo "size=$((kb * 1024))"; fi; done; sleep 2; done`
	readFileScript   = `set -e; set -- $(sha256sum /data/blob); echo "sum=$1"`
	writeBlockScript = `set -e; dd if=/dev/urandom of=/tmp/blob bs=1M count=$MIB 2>/dev/null; dd if=/tmp/blob of=/dev/xvda bs=1M conv=fsync 2>/dev/null; set -- $(sha256sum /tmp/blob); rm /tmp/blob; echo "sum=$1"
while :; do echo "size=$(busybox blockdev --getsize64 /dev/xvda)"; sleep 2; done`
	readBlockScript = `set -e; set -- $(dd if=/dev/xvda bs=1M count=$MIB 2>/dev/null | sha256sum); echo "sum=$1"`
)

// pod renders a pod of podImage that runs script (with dataMiB for $MIB)
// with the volume vol at /data, or as the block device /dev/xvda. Pods
// that exit do not restart, so a failed check stays visible.
func pod(ns, name, script, vol string, block bool) string {
	attach := "volumeMounts: [{name: data, mountPath: /data}]"
	if block {
		attach = "volumeDevices: [{name: data, devicePath: /dev/xvda}]"
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: [sh, -c, %q]
    %s
  volumes:
  - name: data
    %s
`, name, ns, podImage, strings.ReplaceAll(script, "$MIB", strconv.Itoa(dataMiB)), attach, vol)
}

// waitSucceeded waits until a pod that exits has ended (Failed ends the
// wait as well as Succeeded) and fails the test, with the pod's log,
// unless it succeeded.
func waitSucceeded(t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	var phase string
	poll(t, "the "+name+" pod done", 5*time.Minute, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "get", "pod", "-n", ns, name, "-o", "jsonpath={.status.phase}")
		phase = strings.TrimSpace(string(out))
		return err == nil && (phase == "Succeeded" || phase == "Failed"), fmt.Sprintf("phase %q %v", phase, err)
	})
	if phase != "Succeeded" {
		logKubectl(t, c, "logs", "-n", ns, name)
		t.Fatalf("the %s pod %s", name, phase)
	}
}

// podSum waits for the "sum=" line in a pod's log and returns the hex.
func podSum(t *testing.T, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	var sum string
	poll(t, "the checksum in the log of "+name, 3*time.Minute, time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "logs", "-n", ns, name)
		if err != nil {
			return false, err.Error()
		}
		for _, l := range strings.Split(string(out), "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(l), "sum="); ok && len(s) == 64 {
				sum = s
				return true, ""
			}
		}
		return false, string(out)
	})
	return sum
}

// logValues returns every value of the "key=" lines in a pod's log.
func logValues(t *testing.T, c *cluster.Cluster, ns, name, key string) []string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), nil, "logs", "-n", ns, name)
	if err != nil {
		t.Logf("kubectl logs %s/%s: %v", ns, name, err)
		return nil
	}
	var vals []string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+"="); ok {
			vals = append(vals, v)
		}
	}
	return vals
}

// podSize waits until the pod reports a size (the block device's bytes,
// or the filesystem's total bytes as df says) for which ok holds, and
// returns it; it fails with the last size when none does in time.
func podSize(t *testing.T, c *cluster.Cluster, ns, name string, ok func(int64) bool) int64 {
	t.Helper()
	var n int64 = -1
	poll(t, "the size "+name+" reports", 4*time.Minute, 2*time.Second, func() (bool, string) {
		vals := logValues(t, c, ns, name, "size")
		if len(vals) == 0 {
			return false, "no size reported yet"
		}
		v, err := strconv.ParseInt(vals[len(vals)-1], 10, 64)
		if err != nil {
			return false, fmt.Sprintf("size=%q", vals[len(vals)-1])
		}
		n = v
		return ok(v), fmt.Sprintf("%d bytes", v)
	})
	return n
}

// fileSum is the sha256 of a file on the node, through the guest's
// sha256sum.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	out, err := fixture.Command(context.Background(), "checksum", "sha256sum", path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out + " ")[0]
}
