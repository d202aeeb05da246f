//go:build kernel

package pillar_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
)

// provisionerLease is the Lease the csi-provisioner sidecars elect their
// leader on: the driver name with dots as dashes. The replica whose
// sidecar holds it is the one whose pillar-controller serves CreateVolume.
const provisionerLease = "pillar-csi-io"

// TestAgentKilledMidProvisioning kills the pillar-agent pod (every
// process in its cgroup at once, as a node's OOM killer or a crash would)
// at the moment the controller has issued the token for the backend
// create and the agent is making the zvol, before anything is recorded
// as done. The DaemonSet's kubelet restarts it; the provisioner's retry
// must finish the volume from the PillarVolumeState's record: the claim
// binds, there is exactly one zvol for it, and deleting the claim leaves
// nothing behind.
func TestAgentKilledMidProvisioning(t *testing.T) {
	c := setup(t)
	pod := kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "jsonpath={.items[0].metadata.name}")
	midCreate(t, c, "agent killed", pod, killPod)
}

// TestControllerLeaderKilledMidCreate kills the pillar-controller pod
// serving CreateVolume (the one whose csi-provisioner holds the
// provisioner Lease: pillar-controller and its sidecars at once) at the
// same point: the backend create is in flight at the agent, the record
// shows none of it done. A csi-provisioner (the other replica's, or this
// one's once restarted, whichever gets the Lease) retries CreateVolume
// against a fresh pillar-controller, which must resume from the record
// the dead one wrote: the claim binds with exactly one zvol, nothing is
// orphaned.
func TestControllerLeaderKilledMidCreate(t *testing.T) {
	c := setup(t)
	midCreate(t, c, "controller leader killed", provisionerLeader(t, c), killPod)
}

// TestStaleControllerChangesNothing freezes the pillar-controller pod
// serving CreateVolume (every process of it, pillar-controller and its
// sidecars, with cgroup v2's freezer) at the same point: the backend
// create in flight at the agent, nothing recorded as done. Its Leases
// lapse and the other replica's csi-provisioner takes over; the moment it
// holds the provisioner Lease the frozen pod is thawed, and runs on as a
// controller that has lost its leadership without knowing it, with a
// CreateVolume in flight and the fencing token it was issued, racing the
// new leader's retry. Whatever the stale one does (its agent call is
// answered or refused by the agent's fencing, its record writes lose
// their compare-and-swap) it must change nothing: the claim binds to one
// whole volume, exactly one zvol, and deleting the claim leaves nothing.
func TestStaleControllerChangesNothing(t *testing.T) {
	c := setup(t)
	leader := provisionerLeader(t, c)
	restarts := kubectl(t, c, "get", "pod", "-n", deploy.Namespace, leader, "-o", `jsonpath={range .status.containerStatuses[*]}{.name}={.restartCount} {end}`)
	midCreate(t, c, "controller leader frozen", leader, func(t *testing.T, c *cluster.Cluster, podCgroup string) (settle func()) {
		freeze := filepath.Join(podCgroup, "cgroup.freeze")
		if err := os.WriteFile(freeze, []byte("1"), 0o644); err != nil {
			t.Fatalf("freeze pod %s: %v", leader, err)
		}
		thawed := make(chan struct{})
		thaw := sync.OnceFunc(func() {
			if err := os.WriteFile(freeze, []byte("0"), 0o644); err != nil {
				t.Errorf("thaw pod %s: %v", leader, err)
			}
			close(thawed)
		})
		// The watcher below ends before the test does, whichever way it
		// ends: a test that fails before the takeover thaws the pod here.
		stop, watched := make(chan struct{}), make(chan struct{})
		t.Cleanup(func() {
			close(stop)
			<-watched
			thaw()
		})
		t0 := time.Now()
		go func() {
			defer close(watched)
			defer thaw()
			for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
				out, err := c.Kubectl(context.Background(), nil, "get", "lease", "-n", deploy.Namespace, provisionerLease, "-o", "jsonpath={.spec.holderIdentity}")
				if h := strings.TrimSpace(string(out)); err == nil && h != "" && !strings.HasPrefix(h, leader) {
					t.Logf("the provisioner Lease went to %s %v after the freeze; thawing %s", h, time.Since(t0).Round(time.Second), leader)
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
			t.Logf("the provisioner Lease did not change hands in 10 minutes; thawing %s", leader)
		}()
		// The checks wait until the stale pod has run for a while after
		// its thaw: whatever it does, it does before them.
		return func() {
			<-thawed
			time.Sleep(staleRun)
			// What the stale pod did: its containers exit when they find
			// their Leases lost (restarts since the freeze), and its
			// pillar-controller's log since the freeze.
			logKubectl(t, c, "get", "pod", "-n", deploy.Namespace, leader, "-o",
				`jsonpath={range .status.containerStatuses[*]}{.name}: {.restartCount} restarts, now {.state}{"\n"}{end}`)
			t.Logf("restart counts before the freeze: %s", restarts)
			logKubectl(t, c, "get", "events", "-A", "--field-selector", "reason=FencingRefused")
			logKubectl(t, c, "logs", "-n", deploy.Namespace, leader, "-c", "pillar-controller", "--since-time="+t0.UTC().Format(time.RFC3339))
		}
	})
}

// staleRun is how long the thawed controller runs before the checks.
const staleRun = 30 * time.Second

// provisionerLeader is the pillar-controller pod whose csi-provisioner
// holds the provisioner Lease: the one serving CreateVolume. The test
// needs the chart's default of two replicas.
func provisionerLeader(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	replicas := kubectl(t, c, "get", "deployment", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=controller", "-o", "jsonpath={.items[0].status.readyReplicas}")
	if replicas != "2" {
		t.Fatalf("pillar-controller has %q ready replicas; the test needs the chart's default of 2", replicas)
	}
	holder := kubectl(t, c, "get", "lease", "-n", deploy.Namespace, provisionerLease, "-o", "jsonpath={.spec.holderIdentity}")
	pods := strings.Fields(kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=controller", "-o", "jsonpath={.items[*].metadata.name}"))
	for _, p := range pods {
		if strings.HasPrefix(holder, p) {
			return p
		}
	}
	t.Fatalf("the provisioner Lease is held by %q, which is none of the controller pods %v", holder, pods)
	return ""
}

// killPod SIGKILLs every process of the pod in podCgroup at once, with
// cgroup v2's cgroup.kill.
func killPod(t *testing.T, _ *cluster.Cluster, podCgroup string) (settle func()) {
	if err := os.WriteFile(filepath.Join(podCgroup, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		t.Fatalf("kill pod in %s: %v", podCgroup, err)
	}
	return func() {}
}

// backendCreateInFlight is the kill point: the record exists at the
// generation of the first agent call, the backend create (a new record is
// created at generation 1, and the create follows at once), whose result
// is not recorded yet.
func backendCreateInFlight(v *v1alpha1.PillarVolumeState) bool {
	return v.Spec.PublicationGeneration >= 1 && !v.Status.BackendCreated
}

// midCreate creates a ZFS claim, does act to pod (in the release's
// namespace) the moment a watch shows the volume's record at
// backendCreateInFlight, and then checks that the claim binds to a whole
// volume and, once the claim is bound and the settle act returned has
// run, that it is one whole volume and that deleting it leaves nothing.
// what names the act in the figures.
func midCreate(t *testing.T, c *cluster.Cluster, what, pod string, act func(t *testing.T, c *cluster.Cluster, podCgroup string) (settle func())) {
	ns := testNamespace(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	uid := kubectl(t, c, "get", "pod", "-n", deploy.Namespace, pod, "-o", "jsonpath={.metadata.uid}")
	podCgroup := podCgroupDir(t, uid)
	w := watchVolumeStates(t, ctx, c)
	defer w.Stop()

	apply(t, c, claim(ns, "data", "zfs-nvmeof", "Filesystem", "ReadWriteOnce", "128Mi"))
	t0 := time.Now()
	// The external-provisioner names a volume pvc-<claim UID>.
	volumeID := "pvc-" + kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.metadata.uid}")
	var seen *v1alpha1.PillarVolumeState
	for seen == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of PillarVolumeStates ended before %s's backend create", volumeID)
			}
			if v, isPVS := ev.Object.(*v1alpha1.PillarVolumeState); isPVS && v.Name == volumeID && ev.Type != watch.Deleted && backendCreateInFlight(v) {
				seen = v
			}
		case <-ctx.Done():
			t.Fatalf("the backend create of %s did not start: %v", volumeID, ctx.Err())
		}
	}
	settle := act(t, c, podCgroup)
	t.Logf("%s: pod %s, %v after the claim was created: record at generation %d, backendCreated %v, exported %v",
		what, pod, time.Since(t0).Round(time.Millisecond), seen.Spec.PublicationGeneration, seen.Status.BackendCreated, seen.Status.Exported)
	if ok, err := zvolExists(ctx, volumeID); err == nil {
		t.Logf("right after that the zvol of %s exists: %v", volumeID, ok)
	}

	wait(t, c, ns, "pvc/data", "jsonpath={.status.phase}=Bound", 10*time.Minute)
	record(t, what+" mid-CreateVolume: PVC Bound", time.Since(t0))
	settle()
	logKubectl(t, c, "describe", "pvc", "-n", ns, "data")
	pv := kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}")
	if got := kubectl(t, c, "get", "pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}"); got != volumeID {
		t.Fatalf("the claim bound to volume %s, the record being created was %s", got, volumeID)
	}
	ready := kubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}")
	if ready != "True" {
		logKubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", "yaml")
		t.Errorf("PillarVolumeState %s Ready=%q after the claim bound", volumeID, ready)
	}
	if n := zvolCount(t); n != 1 {
		t.Errorf("%d zvols on the storage node, want exactly the claim's one", n)
	}
	logKubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-o", "wide")
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, what+" mid-CreateVolume")
	if n := zvolCount(t); n != 0 {
		t.Errorf("%d zvols left on the storage node after the claim's deletion", n)
	}
}

// watchVolumeStates watches every PillarVolumeState with the admin's
// credentials.
func watchVolumeStates(t *testing.T, ctx context.Context, c *cluster.Cluster) watch.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1alpha1.PillarVolumeStateList{}, &client.ListOptions{FieldSelector: fields.Everything()})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// podCgroupDir is the cgroup of the pod with this UID: the kubelet's
// cgroupfs driver puts it at kubepods[/<QoS class>]/pod<UID>.
func podCgroupDir(t *testing.T, uid string) string {
	t.Helper()
	for _, pattern := range []string{"/sys/fs/cgroup/kubepods/pod" + uid, "/sys/fs/cgroup/kubepods/*/pod" + uid} {
		if m, _ := filepath.Glob(pattern); len(m) == 1 {
			return m[0]
		}
	}
	t.Fatalf("no cgroup for pod %s under /sys/fs/cgroup/kubepods", uid)
	return ""
}

// zvolCount is the number of zvols in the pool: the suite's tests run one
// at a time and each deletes what it made, so any count above one claim's
// volume is an orphan.
func zvolCount(t *testing.T) int {
	t.Helper()
	out, err := zvolList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(out))
}

// nodeStateDir is where the chart's pillar-node keeps its stage records
// on the node (the chart's node.stateDir).
const nodeStateDir = "/var/lib/pillar-csi/node"

// TestNodePluginKilledBetweenStageAndPublish kills the pillar-node pod
// (every process of it at once) the moment its stage record says
// NodeStageVolume finished, before kubelet's NodePublishVolume mounted the
// volume into the pod. kubelet restarts the container; the new pillar-node
// must take the volume from the stage record it finds on the host path:
// kubelet's retried NodeStageVolume is answered from the record and the
// mount that is there, NodePublishVolume bind-mounts it, and the pod
// starts and writes. Deleting the pod and the claim then unstages from
// the same record and leaves nothing behind (no mount, no initiator
// controller, no export, no backend volume).
func TestNodePluginKilledBetweenStageAndPublish(t *testing.T) {
	c := setup(t)
	ns := testNamespace(t, c)
	nodePod := kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=node", "-o", "jsonpath={.items[0].metadata.name}")
	podCgroup := podCgroupDir(t, kubectl(t, c, "get", "pod", "-n", deploy.Namespace, nodePod, "-o", "jsonpath={.metadata.uid}"))
	restartsBefore := kubectl(t, c, "get", "pod", "-n", deploy.Namespace, nodePod, "-o", "jsonpath={.status.containerStatuses[?(@.name==\"pillar-node\")].restartCount}")

	pv, volumeID, _ := boundClaim(t, c, ns, "zfs-nvmeof", "128Mi")
	recordPath := filepath.Join(nodeStateDir, volumeID+".json")

	t0 := time.Now()
	apply(t, c, pod(ns, "writer", writeFileScript, "persistentVolumeClaim: {claimName: data}", false))
	podUID := kubectl(t, c, "get", "pod", "-n", ns, "writer", "-o", "jsonpath={.metadata.uid}")
	target := filepath.Join("/var/lib/kubelet/pods", podUID, "volumes", "kubernetes.io~csi", pv, "mount")
	// NodeStageVolume writes the record twice: before the connect
	// (complete false) and after the mount (complete true); kubelet calls
	// NodePublishVolume once the stage has answered. A poll every
	// millisecond sees the second write long before kubelet, under
	// emulation, has made the next call.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		b, err := os.ReadFile(recordPath)
		var rec struct {
			Complete bool `json:"complete"`
		}
		if err == nil && json.Unmarshal(b, &rec) == nil && rec.Complete {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stage record %s never said complete (last read: %q, %v)", recordPath, b, err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(podCgroup, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		t.Fatalf("kill pod %s: %v", nodePod, err)
	}
	killed := time.Since(t0)
	published, err := isMountPoint(target)
	if err != nil {
		t.Fatal(err)
	}
	if published {
		t.Fatalf("the kill (%v after the pod was created) landed after NodePublishVolume had mounted %s: it did not test a restart between stage and publish", killed, target)
	}
	t.Logf("pillar-node pod %s killed %v after the writer was created: stage record complete, %s not mounted yet",
		nodePod, killed.Round(time.Millisecond), target)

	wait(t, c, ns, "pod/writer", "condition=Ready", 10*time.Minute)
	record(t, "node plugin killed between stage and publish: pod Running", time.Since(t0))
	sum := podSum(t, c, ns, "writer")
	f := strings.Fields(kubectl(t, c, "exec", "-n", ns, "writer", "--", "sha256sum", "/data/blob") + " ")
	if f[0] != sum {
		t.Errorf("kubectl exec sha256sum /data/blob = %q, the writer logged %s", f[0], sum)
	}
	if ok, err := isMountPoint(target); err != nil || !ok {
		t.Errorf("the writer runs but %s is not a mount point (%v)", target, err)
	}
	restarts := kubectl(t, c, "get", "pod", "-n", deploy.Namespace, nodePod, "-o", "jsonpath={.status.containerStatuses[?(@.name==\"pillar-node\")].restartCount}")
	if restarts == restartsBefore {
		t.Errorf("pillar-node's container restart count is still %s: the kill did not restart it", restarts)
	}
	t.Logf("pillar-node's container restarts: %s before, %s after", restartsBefore, restarts)
	logKubectl(t, c, "logs", "-n", deploy.Namespace, nodePod, "-c", "pillar-node", "--tail=40")

	kubectl(t, c, "delete", "pod", "-n", ns, "writer", "--wait=true", "--timeout=3m")
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, "node plugin killed between stage and publish")
	if _, err := os.Stat(recordPath); !os.IsNotExist(err) {
		t.Errorf("the stage record %s is left after the claim's deletion (%v)", recordPath, err)
	}
}

// isMountPoint says whether path is a mount point in this mount namespace
// (the node's, where kubelet mounts pods' volumes).
func isMountPoint(path string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		// Field 5 is the mount point, with spaces and the like octal-escaped.
		if f := strings.Fields(l); len(f) > 4 && f[4] == path {
			return true, nil
		}
	}
	return false, nil
}
