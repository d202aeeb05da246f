// Command demo shows pillar-csi the way a user meets it: in a Kubernetes
// cluster, installed with Helm, driven through a PersistentVolumeClaim.
//
// Inside the kernel lab's guest it boots the one-node cluster of
// tests/e2e/cluster (real kubelet, containerd, control plane), makes the
// storage node's pools (a zpool and an LVM thin pool on loop devices),
// installs deploy/charts/pillar-csi with the images of make images, applies
// the CRD YAML of deploy/examples, and then binds a claim of the generated
// StorageClass: a pod writes data through NVMe/TCP and prints its
// checksum, a second pod reads it back, and deleting the claim removes the
// zvol and its export. `kubectl get` shows the objects at each step, and
// the claim's events at the end. The install is the one the end-to-end
// suite proves (tests/e2e/deploy).
//
// Run it with `make demo` (root, the kernel lab); outside the lab it
// refuses to start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

const (
	ns        = "demo"
	class     = "zfs-nvmeof"
	claimSize = "256Mi"
	// dataMiB is what the writer pod writes.
	dataMiB = 32
	// waitTimeout bounds each wait of the demo; a busy TCG guest can take
	// minutes for a step that takes seconds on a real node.
	waitTimeout = 10 * time.Minute
)

type demo struct {
	c     *cluster.Cluster
	out   io.Writer
	start time.Time
	step  int
}

// progress prints one numbered step with the time since the demo began.
func (d *demo) progress(format string, args ...any) {
	d.step++
	fmt.Fprintf(d.out, "\n==> [%d] %s  (%s)\n", d.step, fmt.Sprintf(format, args...), time.Since(d.start).Round(time.Second))
}

// show prints `kubectl ARGS` and what it answers.
func (d *demo) show(args ...string) {
	deploy.Show(context.Background(), d.c, d.out, args...)
}

func (d *demo) kubectl(stdin string, args ...string) (string, error) {
	var in []byte
	if stdin != "" {
		in = []byte(stdin)
	}
	out, err := d.c.Kubectl(context.Background(), in, args...)
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// waitFor runs `kubectl wait` until cond holds for obj, in chunks under
// the harness's bound on one kubectl.
func (d *demo) waitFor(obj, cond string) error {
	deadline := time.Now().Add(waitTimeout)
	for {
		_, err := d.kubectl("", "wait", "-n", ns, "--for="+cond, obj, "--timeout=120s")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			d.show("describe", "-n", ns, obj)
			return fmt.Errorf("%s: not %s within %v: %w", obj, cond, waitTimeout, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// sum waits for the "sum=<hex>" line in a pod's log.
func (d *demo) sum(pod string) (string, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		out, err := d.kubectl("", "logs", "-n", ns, pod)
		if err == nil {
			for _, l := range strings.Split(out, "\n") {
				if s, ok := strings.CutPrefix(strings.TrimSpace(l), "sum="); ok && len(s) == 64 {
					return s, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no checksum in the log of pod %s within %v (%v)", pod, waitTimeout, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// pod is a busybox pod with the claim "data" at /data running script.
func pod(name, script string) string {
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
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data}
`, name, ns, cluster.BusyboxImage, script)
}

func (d *demo) run(root string, storage **deploy.Storage) error {
	ctx := context.Background()
	d.progress("storage node: a zpool %q and a volume group %q with thin pool %q", deploy.ZPool, deploy.VG, deploy.ThinPool)
	s, err := deploy.NewStorage(ctx, d.out)
	if err != nil {
		return err
	}
	*storage = s

	d.progress("helm install pillar-csi, then the PillarAgent, PillarStores, PillarProtocol and PillarStorageClasses of deploy/examples")
	if err := deploy.Install(ctx, d.c, root, d.out); err != nil {
		return err
	}
	d.show("get", "pods", "-n", deploy.Namespace)

	d.progress("a PersistentVolumeClaim of the generated StorageClass %s", class)
	if _, err := d.kubectl("", "create", "namespace", ns); err != nil {
		return err
	}
	claim := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: %s}
spec:
  storageClassName: %s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: %s}}
`, ns, class, claimSize)
	fmt.Fprintf(d.out, "%s", claim)
	if _, err := d.kubectl(claim, "apply", "-f", "-"); err != nil {
		return err
	}
	t0 := time.Now()
	if err := d.waitFor("pvc/data", "jsonpath={.status.phase}=Bound"); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "Bound after %v\n", time.Since(t0).Round(100*time.Millisecond))
	d.show("get", "pvc,pv", "-n", ns)
	pv, err := d.kubectl("", "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}")
	if err != nil {
		return err
	}
	volumeID, err := d.kubectl("", "get", "pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}")
	if err != nil {
		return err
	}
	d.show("get", "pillarvolumestate", volumeID, "-o", "wide")

	d.progress("a pod writes %d MiB to the volume (NVMe/TCP from the node's kernel initiator to nvmet)", dataMiB)
	writer := fmt.Sprintf(`set -e; dd if=/dev/urandom of=/data/blob bs=1M count=%d 2>/dev/null; sync; set -- $(sha256sum /data/blob); echo "sum=$1"; grep ' /data ' /proc/mounts`, dataMiB)
	if _, err := d.kubectl(pod("writer", writer), "apply", "-f", "-"); err != nil {
		return err
	}
	t1 := time.Now()
	if err := d.waitFor("pod/writer", "jsonpath={.status.phase}=Succeeded"); err != nil {
		d.show("logs", "-n", ns, "writer")
		return err
	}
	fmt.Fprintf(d.out, "the writer ran and exited in %v\n", time.Since(t1).Round(100*time.Millisecond))
	d.show("logs", "-n", ns, "writer")
	written, err := d.sum("writer")
	if err != nil {
		return err
	}
	d.show("get", "volumeattachment")
	if _, err := d.kubectl("", "delete", "pod", "-n", ns, "writer", "--wait=true", "--timeout=3m"); err != nil {
		return err
	}

	d.progress("a new pod reads the data back")
	reader := `set -e; set -- $(sha256sum /data/blob); echo "sum=$1"`
	if _, err := d.kubectl(pod("reader", reader), "apply", "-f", "-"); err != nil {
		return err
	}
	if err := d.waitFor("pod/reader", "jsonpath={.status.phase}=Succeeded"); err != nil {
		d.show("logs", "-n", ns, "reader")
		return err
	}
	read, err := d.sum("reader")
	if err != nil {
		return err
	}
	if read != written {
		return fmt.Errorf("the reader sees sha256 %s, the writer wrote %s", read, written)
	}
	fmt.Fprintf(d.out, "sha256 %s written and read back by two pods: the data survived the unpublish and the new attach\n", written)
	d.show("describe", "pvc", "-n", ns, "data")
	if _, err := d.kubectl("", "delete", "pod", "-n", ns, "reader", "--wait=true", "--timeout=3m"); err != nil {
		return err
	}

	d.progress("delete the claim: the PV, the PillarVolumeState, the zvol and its export go with it")
	if _, err := d.kubectl("", "delete", "pvc", "-n", ns, "data", "--wait=true", "--timeout=3m"); err != nil {
		return err
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		out, err := d.kubectl("", "get", "pv,pillarvolumestate", "--ignore-not-found", "-o", "name")
		if err == nil && !strings.Contains(out, pv) && !strings.Contains(out, volumeID) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PV %s or PillarVolumeState %s still there %v after the claim's deletion: %s", pv, volumeID, waitTimeout, out)
		}
		time.Sleep(2 * time.Second)
	}
	d.show("get", "pillar,pv")
	// On the storage node: no zvol, no nvmet subsystem left.
	zvols, err := fixture.Command(ctx, "list zvols", "zfs", "list", "-H", "-o", "name", "-t", "volume", "-r", deploy.ZPool)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "$ zfs list -t volume -r %s\n%s", deploy.ZPool, zvols)
	subs, err := os.ReadDir(filepath.Join(fixture.NVMetRoot, "subsystems"))
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "$ ls %s/subsystems\n", fixture.NVMetRoot)
	for _, e := range subs {
		fmt.Fprintln(d.out, e.Name())
	}
	if strings.Contains(zvols, volumeID) {
		return fmt.Errorf("the zvol of %s is still on the storage node", volumeID)
	}
	id, err := export.For(volumeID)
	if err != nil {
		return err
	}
	for _, e := range subs {
		if e.Name() == id.SubsystemNQN {
			return fmt.Errorf("the nvmet subsystem %s is still in configfs", e.Name())
		}
	}
	return nil
}

func main() {
	root := flag.String("root", "", "the repository (bin/, bin/images/, deploy/); found from the working directory if empty")
	flag.Parse()
	if !guest.InLab() {
		fmt.Fprintln(os.Stderr, "demo: run it in the kernel lab: make demo")
		os.Exit(2)
	}
	if err := mainErr(*root); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo: FAILED: %v\n", err)
		os.Exit(1)
	}
}

func mainErr(root string) error {
	if root == "" {
		r, err := cluster.RepoRoot()
		if err != nil {
			return err
		}
		root = r
	}
	d := &demo{out: os.Stdout, start: time.Now()}
	d.progress("boot a one-node Kubernetes cluster in the lab guest (etcd, kube-apiserver, controller-manager, scheduler, kubelet, kube-proxy, containerd)")
	c, err := cluster.Start(context.Background(), cluster.Options{
		BinDir:   filepath.Join(root, "bin"),
		ImageDir: filepath.Join(root, "bin", "images"),
		Log:      os.Stdout,
	})
	if err != nil {
		return err
	}
	d.c = c
	var storage *deploy.Storage
	err = d.run(root, &storage)
	if err != nil {
		deploy.Diagnose(os.Stdout, c)
	}
	d.progress("tear down")
	if serr := c.Stop(); serr != nil {
		err = errors.Join(err, fmt.Errorf("cluster teardown: %w", serr))
	}
	if storage != nil {
		storage.Close(os.Stdout)
	}
	if err == nil {
		fmt.Fprintf(os.Stdout, "\ndemo: done in %v\n", time.Since(d.start).Round(time.Second))
	}
	return err
}
