//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
)

// provisionerLease is the Lease the csi-provisioner sidecars elect their
// leader on: the driver name with dots as dashes. The replica whose
// sidecar holds it is the one whose pillar-controller serves CreateVolume.
const provisionerLease = "pillar-csi-io"

// TestAgentKilledMidProvisioning SIGKILLs pillar-agent (its pod
// force-deleted) as soon as the claim's zvol exists on the storage node,
// before the controller can have recorded it or exported it. The
// provisioner's retry, against the DaemonSet's new agent, must finish the
// volume from the PillarVolumeState's record: the claim binds, there is
// exactly one zvol for it, and deleting the claim leaves nothing behind.
func TestAgentKilledMidProvisioning(t *testing.T) {
	c := setup(t)
	killMidCreate(t, c, "agent", func(t *testing.T) string {
		p := kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=agent", "-o", "jsonpath={.items[0].metadata.name}")
		kubectl(t, c, "delete", "pod", "-n", deploy.Namespace, p, "--grace-period=0", "--force", "--wait=false")
		return p
	})
}

// TestControllerLeaderKilledMidCreate kills the pillar-controller pod
// serving CreateVolume (the one whose csi-provisioner holds the
// provisioner Lease) as soon as the claim's zvol exists. The other
// replica's sidecar takes the Lease over and retries CreateVolume against
// its own pillar-controller, which must resume from the record the dead
// one wrote: the claim binds with exactly one zvol, nothing is orphaned.
func TestControllerLeaderKilledMidCreate(t *testing.T) {
	c := setup(t)
	replicas := kubectl(t, c, "get", "deployment", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=controller", "-o", "jsonpath={.items[0].status.readyReplicas}")
	if replicas != "2" {
		t.Fatalf("pillar-controller has %q ready replicas; the test needs the chart's default of 2", replicas)
	}
	killMidCreate(t, c, "controller", func(t *testing.T) string {
		holder := kubectl(t, c, "get", "lease", "-n", deploy.Namespace, provisionerLease, "-o", "jsonpath={.spec.holderIdentity}")
		pods := strings.Fields(kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=controller", "-o", "jsonpath={.items[*].metadata.name}"))
		for _, p := range pods {
			if strings.HasPrefix(holder, p) {
				kubectl(t, c, "delete", "pod", "-n", deploy.Namespace, p, "--grace-period=0", "--force", "--wait=false")
				return p
			}
		}
		t.Fatalf("the provisioner Lease is held by %q, which is none of the controller pods %v", holder, pods)
		return ""
	})
}

// killMidCreate creates a ZFS claim, calls kill (which names what it
// killed) as soon as the claim's zvol appears, and then checks that the
// claim binds to a whole volume and that deleting it leaves nothing.
func killMidCreate(t *testing.T, c *cluster.Cluster, what string, kill func(*testing.T) string) {
	ns := testNamespace(t, c)
	ctx := context.Background()
	apply(t, c, claim(ns, "data", "zfs-nvmeof", "Filesystem", "ReadWriteOnce", "128Mi"))
	// The external-provisioner names a volume pvc-<claim UID>.
	uid := kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.metadata.uid}")
	volumeID := "pvc-" + uid
	t0 := time.Now()
	poll(t, "the zvol of "+volumeID, 5*time.Minute, 100*time.Millisecond, func() (bool, string) {
		ok, err := zvolExists(ctx, volumeID)
		return ok, fmt.Sprint(err)
	})
	state, _ := c.Kubectl(ctx, nil, "get", "pillarvolumestate", volumeID, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}")
	killed := kill(t)
	t.Logf("%s pod %s killed %v after the claim was created, when its zvol had appeared (record: %q)",
		what, killed, time.Since(t0).Round(100*time.Millisecond), strings.TrimSpace(string(state)))

	wait(t, c, ns, "pvc/data", "jsonpath={.status.phase}=Bound", 10*time.Minute)
	record(t, what+" killed mid-CreateVolume: PVC Bound", time.Since(t0))
	logKubectl(t, c, "describe", "pvc", "-n", ns, "data")
	pv := kubectl(t, c, "get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.volumeName}")
	if got := kubectl(t, c, "get", "pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}"); got != volumeID {
		t.Fatalf("the claim bound to volume %s, the zvol that appeared was %s", got, volumeID)
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
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, what+" killed mid-CreateVolume")
	if n := zvolCount(t); n != 0 {
		t.Errorf("%d zvols left on the storage node after the claim's deletion", n)
	}
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
