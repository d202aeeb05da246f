//go:build kernel

package pillar_test

import (
	"testing"
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
