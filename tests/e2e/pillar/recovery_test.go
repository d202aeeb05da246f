//go:build kernel

package pillar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
)

// pvsCRD is the PillarVolumeState CRD.
const pvsCRD = "pillarvolumestates.pillar-csi.io"

// TestExportSpecMissingRecovery runs the ExportSpecMissing recovery
// procedure of docs/troubleshooting.md as written, on a volume whose
// record lost its export spec the way a release that did not record it
// left it: a bound claim whose PillarVolumeState has no spec.export. A pod
// of the claim cannot attach (FailedAttachVolume naming ExportSpecMissing);
// the procedure's commands, with the lab's PillarProtocol values in the
// patch file, state the export, and the pod starts and writes.
//
// Such a record cannot be made with the CRD as it is: its rule keeps a
// recorded export from being removed. The test drops that rule, removes
// the export, and puts the CRD back with the command of docs/upgrading.md,
// as an upgrade from a release without the rule would.
func TestExportSpecMissingRecovery(t *testing.T) {
	c := setup(t)
	ns := testNamespace(t, c)
	pv, volumeID, _ := boundClaim(t, c, ns, "zfs-nvmeof", "256Mi")
	wait(t, c, "", "pillarvolumestate/"+volumeID, "condition=Ready", 5*time.Minute)
	// What the procedure states; the subsystem NQN it leaves to the
	// driver, which derives the one the volume was created with.
	const stated = "jsonpath={.spec.export.bindAddress} {.spec.export.port} {.spec.export.aclEnabled}"
	recorded := kubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", stated)
	t.Logf("the record's export spec: bindAddress, port, aclEnabled %s", recorded)

	forgetExport(t, c, volumeID)
	wait(t, c, "", "pillarvolumestate/"+volumeID, "condition=ExportSpecMissing", 3*time.Minute)
	logKubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", "wide")

	// A pod of the claim: the attach is refused and says why.
	apply(t, c, pod(ns, "user", writeFileScript, "persistentVolumeClaim: {claimName: data}", false))
	poll(t, "a FailedAttachVolume event naming ExportSpecMissing", 5*time.Minute, 3*time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "get", "events", "-n", ns, "--field-selector", "involvedObject.name=user,reason=FailedAttachVolume",
			"-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		return err == nil && strings.Contains(string(out), "ExportSpecMissing"), fmt.Sprintf("%s %v", out, err)
	})
	logKubectl(t, c, "describe", "pod", "-n", ns, "user")

	// The operator's patch: the example with the values the volume was
	// exported with, i.e. those of the lab's PillarProtocol (the
	// examples' 03-pillarprotocol-nvmeof-tcp.yaml).
	example, err := os.ReadFile(filepath.Join(lab.root, "deploy", "examples", "recovery", "export-spec-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	patch := strings.Replace(string(example), "bindAddress: 192.0.2.10", "bindAddress: 0.0.0.0", 1)
	if patch == string(example) {
		t.Fatal("deploy/examples/recovery/export-spec-patch.yaml no longer says bindAddress: 192.0.2.10")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "export-spec-patch.yaml"), []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := deploy.RecoveryScript(lab.root, volumeID, pv)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = c.Shell(context.Background(), 10*time.Minute, dir, script, &out)
	t.Logf("the recovery procedure's commands and their output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}

	wait(t, c, ns, "pod/user", "condition=Ready", 10*time.Minute)
	podSum(t, c, ns, "user")
	reason := kubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", `jsonpath={.status.conditions[?(@.type=="ExportSpecMissing")].reason}`)
	if reason != "ExportSpecStated" {
		t.Errorf("condition ExportSpecMissing has reason %q after the recovery, want ExportSpecStated", reason)
	}
	if got := kubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", stated); got != recorded {
		t.Errorf("the stated export spec is %s, the volume was created with %s", got, recorded)
	}
	logKubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", "wide")
	kubectl(t, c, "delete", "pod", "-n", ns, "user", "--wait=true", "--timeout=3m")
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, "recovered volume")
}

// forgetExport removes the export spec from the record of volumeID, as a
// release that did not record it left it: it drops the CRD's rule that
// forbids that, removes the field, and applies the chart's CRD again as
// docs/upgrading.md says.
func forgetExport(t *testing.T, c *cluster.Cluster, volumeID string) {
	t.Helper()
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Rules []struct{ Rule string } `json:"x-kubernetes-validations"`
							} `json:"spec"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(kubectl(t, c, "get", "crd", pvsCRD, "-o", "json")), &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("CRD %s: %v (%d versions)", pvsCRD, err, len(crd.Spec.Versions))
	}
	rule := -1
	for i, r := range crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Rules {
		if strings.Contains(r.Rule, "oldSelf.export") {
			rule = i
		}
	}
	if rule < 0 {
		t.Fatalf("CRD %s has no rule on spec.export", pvsCRD)
	}
	crds := filepath.Join(lab.root, "deploy", "charts", "pillar-csi", "crds")
	kubectl(t, c, "patch", "crd", pvsCRD, "--type", "json", "-p",
		fmt.Sprintf(`[{"op": "remove", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/x-kubernetes-validations/%d"}]`, rule))
	// The tests after this one get the rule back even if this one stops
	// half-way.
	t.Cleanup(func() {
		c.Kubectl(context.Background(), nil, "apply", "--server-side", "--force-conflicts", "-f", crds)
	})
	// The API server takes the new schema a moment after the update. The
	// old release that left the field out was pillar-controller itself:
	// the chart's admission policy lets only its ServiceAccount change a
	// record's spec.
	poll(t, "the record's export spec removed", time.Minute, time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "patch", "pillarvolumestate", volumeID, "--as", deploy.ControllerUser,
			"--type", "json", "-p", `[{"op": "remove", "path": "/spec/export"}]`)
		return err == nil, fmt.Sprintf("%s %v", out, err)
	})
	// docs/upgrading.md's command puts the rule back. Without
	// --force-conflicts it refuses: the rule's list now belongs to
	// another field manager, as after helm's install.
	kubectl(t, c, "apply", "--server-side", "--force-conflicts", "-f", crds)
	if out := kubectl(t, c, "get", "crd", pvsCRD, "-o", "json"); !strings.Contains(out, "oldSelf.export") {
		t.Fatalf("CRD %s lacks its rule on spec.export after the apply", pvsCRD)
	}
	t.Logf("PillarVolumeState %s: spec.export removed; CRD %s applied again", volumeID, pvsCRD)
}
