//go:build kernel

package pillar_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
)

// TestInstall is the install a user does: label the storage node, helm
// install the chart with --wait, apply the documented CRD YAML, and see
// every Pillar* object Ready and the generated StorageClasses appear. The
// other tests build on it (whichever runs first does the install).
func TestInstall(t *testing.T) {
	c := clusterOnly(t)
	installOnce(c)
	if lab.installErr != nil {
		t.Fatal(lab.installErr)
	}
	// The install proved it; state it as the checks a user would read.
	out := kubectl(t, c, "get", "csidriver", "pillar-csi.io", "-o", "jsonpath={.spec.attachRequired}")
	if out != "true" {
		t.Errorf("CSIDriver pillar-csi.io attachRequired = %q, want true", out)
	}
	out = kubectl(t, c, "get", "csinode", c.NodeName, "-o", `jsonpath={.spec.drivers[?(@.name=="pillar-csi.io")].nodeID}`)
	if out == "" {
		t.Errorf("CSINode %s has no pillar-csi.io driver: pillar-node did not register with kubelet", c.NodeName)
	} else {
		t.Logf("CSINode %s: pillar-csi.io node ID %s", c.NodeName, out)
	}
}

// TestQuickstart runs the README quickstart's "A volume" as written: two
// claims of the generated StorageClasses bound, a pod that writes to the
// filesystem one, kubectl exec into it; then its cleanup, after which the
// volumes are gone from the cluster and from the storage node.
func TestQuickstart(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	// 06-pod.yaml's image, served by the harness's busybox.
	if err := c.ImportBusybox(ctx, "docker.io/library/busybox:1.37"); err != nil {
		t.Fatal(err)
	}
	blocks, err := deploy.QuickstartBlocks(lab.root, deploy.QuickstartVolume)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("the quickstart's %q has %d command blocks; this test runs the first, looks at the volumes, then runs the cleanup", deploy.QuickstartVolume, len(blocks))
	}
	shell := func(script string) {
		t.Helper()
		var out bytes.Buffer
		err := c.Shell(ctx, 20*time.Minute, lab.root, script, &out)
		t.Logf("the quickstart's commands and their output:\n%s", out.String())
		if err != nil {
			logKubectl(t, c, "describe", "pvc", "-n", "default")
			logKubectl(t, c, "describe", "pod", "-n", "default")
			t.Fatal(err)
		}
	}
	shell(blocks[0])
	mounts := kubectl(t, c, "exec", "-n", "default", "writer", "--", "cat", "/proc/mounts")
	var mount string
	for _, l := range strings.Split(mounts, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[1] == "/data" {
			mount = l
		}
	}
	if !strings.HasPrefix(mount, "/dev/nvme") || !strings.Contains(mount, " ext4 ") {
		t.Errorf("the writer's /data is %q, want an ext4 filesystem on an NVMe device", mount)
	}
	vols := map[string]func(context.Context, string) (bool, error){"data": zvolExists, "raw": lvExists}
	pvs, ids := map[string]string{}, map[string]string{}
	for claim := range vols {
		pvs[claim] = kubectl(t, c, "get", "pvc", "-n", "default", claim, "-o", "jsonpath={.spec.volumeName}")
		ids[claim] = kubectl(t, c, "get", "pv", pvs[claim], "-o", "jsonpath={.spec.csi.volumeHandle}")
	}
	t0 := time.Now()
	shell(blocks[1])
	for claim, backend := range vols {
		volumeGone(t, c, pvs[claim], ids[claim], backend, "quickstart "+claim, t0)
	}
}
