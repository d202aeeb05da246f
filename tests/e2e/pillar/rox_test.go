//go:build kernel

package pillar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// roxWriteScript writes the blob once and exits; roxReadScript reads it,
// tries to write next to it, and stays up so that the readers hold the
// volume at the same time.
const (
	roxWriteScript = `set -e; dd if=/dev/urandom of=/data/blob bs=1M count=$MIB 2>/dev/null; sync; set -- $(sha256sum /data/blob); echo "sum=$1"`
	roxReadScript  = readFileScript + `
if touch /data/written-by-a-reader 2>/dev/null; then echo "write=allowed"; else echo "write=refused"; fi
while :; do sleep 3600; done`
)

// TestReadOnlyMany shares a volume read-only as docs/install.md's
// "Sharing a volume read-only" says: a pod writes a ReadWriteOnce claim;
// its PV is kept (reclaimPolicy Retain) when the claim goes; a
// ReadOnlyMany PV of the same volume handle is bound to a new claim, and
// two pods read it at the same time, in a two-guest run one on each
// node. Both read what the writer wrote, neither can write, the
// PillarVolumeState records one ReadOnlyMany publication per node, and
// the storage node's access list holds each reader's host NQN. Once the
// readers are gone and the original PV's policy is Delete again,
// everything the driver made is gone.
func TestReadOnlyMany(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := testNamespace(t, c)
	pv, volumeID, id := boundClaim(t, c, ns, "zfs-nvmeof", "256Mi")
	volume := "persistentVolumeClaim: {claimName: data}"
	apply(t, c, pod(ns, "writer", roxWriteScript, volume, false))
	waitSucceeded(t, c, ns, "writer")
	sum := podSum(t, c, ns, "writer")
	t.Logf("the writer wrote %d MiB, sha256 %s", dataMiB, sum)
	kubectl(t, c, "delete", "pod", "-n", ns, "writer", "--wait=true", "--timeout=3m")
	// The writer's read-write publication must be gone before a reader
	// asks for the volume, or the reader's attach is refused (and
	// retried) until it is.
	attachmentsGone(t, c, pv)

	// Keep the volume, let its claim go. Should the test stop half way,
	// the cleanup hands both PVs back to the provisioner's deletion.
	roPV := "rox-" + pv
	t.Cleanup(func() {
		_, _ = c.Kubectl(ctx, nil, "delete", "pv", roPV, "--ignore-not-found", "--wait=false")
		_, _ = c.Kubectl(ctx, nil, "patch", "pv", pv, "--type=merge", "-p", `{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}`)
	})
	kubectl(t, c, "patch", "pv", pv, "--type=merge", "-p", `{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`)
	kubectl(t, c, "delete", "pvc", "-n", ns, "data", "--wait=true", "--timeout=3m")
	wait(t, c, "", "pv/"+pv, "jsonpath={.status.phase}=Released", 3*time.Minute)

	// The ReadOnlyMany PV: the original's csi source under another name,
	// bound in advance to the claim "shared".
	apply(t, c, readOnlyPV(t, kubectl(t, c, "get", "pv", pv, "-o", "json"), roPV, ns, "shared"))
	apply(t, c, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: shared, namespace: %s}
spec:
  storageClassName: ""
  volumeName: %s
  accessModes: [ReadOnlyMany]
  resources: {requests: {storage: 256Mi}}
`, ns, roPV))
	wait(t, c, ns, "pvc/shared", "jsonpath={.status.phase}=Bound", 3*time.Minute)

	nodes := []string{c.NodeName, c.NodeName}
	if c.PeerName != "" {
		nodes[1] = c.PeerName
	}
	shared := "persistentVolumeClaim: {claimName: shared, readOnly: true}"
	readers := []string{"reader-a", "reader-b"}
	t0 := time.Now()
	for i, name := range readers {
		apply(t, c, onNode(pod(ns, name, roxReadScript, shared, false), nodes[i]))
	}
	for _, name := range readers {
		wait(t, c, ns, "pod/"+name, "condition=Ready", 5*time.Minute)
	}
	record(t, "ReadOnlyMany: both readers Running", time.Since(t0))
	for i, name := range readers {
		if got := podSum(t, c, ns, name); got != sum {
			t.Errorf("%s on %s reads sha256 %s, the writer wrote %s", name, nodes[i], got, sum)
		}
		var w []string
		poll(t, "the write attempt of "+name, time.Minute, time.Second, func() (bool, string) {
			w = logValues(t, c, ns, name, "write")
			return len(w) > 0, "no write= line yet"
		})
		if w[0] != "refused" {
			t.Errorf("%s on %s could write to the ReadOnlyMany volume (write=%s)", name, nodes[i], w[0])
		}
	}
	logKubectl(t, c, "get", "pod", "-n", ns, "-o", "wide")
	logKubectl(t, c, "get", "volumeattachment", "-o", "wide")

	// The record and the storage node's access list.
	out := kubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", `jsonpath={range .spec.publications[*]}{.nodeID} {.accessMode}{"\n"}{end}`)
	t.Logf("PillarVolumeState %s publications:\n%s", volumeID, out)
	var pubNodes []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || f[1] != "ReadOnlyMany" {
			t.Errorf("publication %q, want <node ID> ReadOnlyMany", l)
			continue
		}
		nid, err := export.ParseNodeID(f[0])
		if err != nil {
			t.Errorf("publication %q: %v", l, err)
			continue
		}
		pubNodes = append(pubNodes, nid.NodeName)
	}
	want := slices.Compact(slices.Sorted(slices.Values(nodes)))
	if slices.Sort(pubNodes); !slices.Equal(pubNodes, want) {
		t.Errorf("published to %v, want %v", pubNodes, want)
	}
	hosts := filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN, "allowed_hosts")
	for _, n := range want {
		if ok, err := storageHas(ctx, c, filepath.Join(hosts, hostNQN(t, c, n))); err != nil || !ok {
			t.Errorf("the host NQN of %s is not on the subsystem's allowed_hosts (%v)", n, err)
		}
	}

	// Tear down: the readers, the read-only claim and PV (Retain: the
	// volume stays), then the original PV with Delete again.
	for _, name := range readers {
		kubectl(t, c, "delete", "pod", "-n", ns, name, "--wait=true", "--timeout=3m")
	}
	attachmentsGone(t, c, roPV)
	kubectl(t, c, "delete", "pvc", "-n", ns, "shared", "--wait=true", "--timeout=3m")
	kubectl(t, c, "delete", "pv", roPV, "--wait=true", "--timeout=3m")
	if ok, err := zvolExists(ctx, volumeID); err != nil || !ok {
		t.Fatalf("the zvol of %s went with the Retain PV %s (%v)", volumeID, roPV, err)
	}
	t1 := time.Now()
	kubectl(t, c, "patch", "pv", pv, "--type=merge", "-p", `{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}`)
	volumeGone(t, c, pv, volumeID, zvolExists, "ReadOnlyMany", t1)
}

// attachmentsGone waits until no VolumeAttachment names the PV pv.
func attachmentsGone(t *testing.T, c *cluster.Cluster, pv string) {
	t.Helper()
	poll(t, "the VolumeAttachments of "+pv+" gone", 5*time.Minute, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(context.Background(), nil, "get", "volumeattachment", "-o", "jsonpath={.items[*].spec.source.persistentVolumeName}")
		return err == nil && !slices.Contains(strings.Fields(string(out)), pv), string(out)
	})
}

// readOnlyPV renders, from the JSON of a provisioned PV, a PV named name
// of the same CSI volume with access mode ReadOnlyMany, reclaimPolicy
// Retain, no StorageClass, bound in advance to the claim ns/claim: what
// docs/install.md has an operator write by hand.
func readOnlyPV(t *testing.T, pvJSON, name, ns, claim string) string {
	t.Helper()
	var src struct {
		Spec struct {
			Capacity map[string]string `json:"capacity"`
			CSI      map[string]any    `json:"csi"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(pvJSON), &src); err != nil {
		t.Fatalf("PV JSON: %v", err)
	}
	if src.Spec.CSI == nil {
		t.Fatalf("PV has no csi source: %s", pvJSON)
	}
	out, err := json.Marshal(map[string]any{
		"apiVersion": "v1",
		"kind":       "PersistentVolume",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"capacity":                      src.Spec.Capacity,
			"accessModes":                   []string{"ReadOnlyMany"},
			"persistentVolumeReclaimPolicy": "Retain",
			"storageClassName":              "",
			"volumeMode":                    "Filesystem",
			"claimRef":                      map[string]any{"namespace": ns, "name": claim},
			"csi":                           src.Spec.CSI,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
