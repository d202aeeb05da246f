//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// The line a deleted tenant's pod writes over its whole Block volume, and
// what the next tenant's pod must not read.
const oldTenantMark = "PILLAR-OLD-TENANT-DATA"

// The pods of TestBlockClaimsReadNoOldData: the first fills its device
// with the mark and counts it back ("marks="); the second counts the bytes
// of its device that are not zero ("nonzero=") and the mark ("marks=").
const (
	fillMarkScript = `set -e; size=$(busybox blockdev --getsize64 /dev/xvda); yes ` + oldTenantMark + ` | head -c $size > /dev/xvda; sync
echo "size=$size"; echo "marks=$(grep -c ` + oldTenantMark + ` /dev/xvda || true)"`
	readOldScript = `set -e; echo "size=$(busybox blockdev --getsize64 /dev/xvda)"; echo "nonzero=$(tr -d '\000' < /dev/xvda | wc -c)"; echo "marks=$(grep -c ` + oldTenantMark + ` /dev/xvda || true)"`
)

// leakClaimSize is the size of both tenants' claims: a whole number of
// LVM extents (4 MiB), so that the second claim's LV fits exactly the
// extents the first one freed.
const leakClaimSize = "64Mi"

// TestBlockClaimsReadNoOldData proves, with Block claims as a tenant sees
// them, that a new volume never shows what a deleted one wrote (SECURITY.md,
// "No tenant reads another's data"): on each backend a pod fills a claim
// with a mark, the claim is deleted, a new claim of the same size is
// bound and its pod reads every byte of it: all zero. On a linear LV,
// which gets freed extents as they were, the rest of the volume group is
// filled first, so the new LV must take exactly the deleted one's extents
// (checked with lvs): without the agent's zeroing it would read the mark.
// On ZFS and thin LVM, where the pool decides which blocks a volume gets,
// the new volume is read whole in the same way; there the check cannot
// fail by itself (a new zvol or thin LV reads zeroes where it was never
// written; the thin pool's leak needs a partial chunk write, which
// tests/kernel/backends' TestLVMLeakWithoutZeroing makes), and it stands
// for what a tenant of those stores sees.
func TestBlockClaimsReadNoOldData(t *testing.T) {
	c := setup(t)
	const linear = "lvm-linear"
	apply(t, c, fmt.Sprintf(`apiVersion: pillar-csi.io/v1alpha1
kind: PillarStore
metadata: {name: %[1]s}
spec:
  agentName: %[2]s
  type: LVM
  lvm: {volumeGroup: %[3]s}
---
`, linear, deploy.AgentName, deploy.VG)+pillarClass(linear, linear, "nvmeof-tcp"))
	t.Cleanup(func() {
		// The class first, so that no claim is made on the store while
		// it goes (it waits for its volumes: the in-use finalizer).
		logKubectl(t, c, "delete", "pillarstorageclass", linear, "--ignore-not-found", "--wait=true", "--timeout=2m")
		logKubectl(t, c, "delete", "pillarstore", linear, "--ignore-not-found", "--wait=true", "--timeout=2m")
	})
	wait(t, c, "", "pillarstore/"+linear, "condition=Ready", 5*time.Minute)
	wait(t, c, "", "pillarstorageclass/"+linear, "condition=Ready", 5*time.Minute)

	for _, tc := range []struct {
		name, class string
		backend     func(context.Context, string) (bool, error)
		linear      bool
	}{
		{name: "lvm-linear", class: linear, backend: lvExists, linear: true},
		{name: "lvm-thin", class: "lvm-nvmeof-xfs", backend: lvExists},
		{name: "zfs", class: "zfs-nvmeof", backend: zvolExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testNamespace(t, c)
			pv, volumeID, _ := boundClaimMode(t, c, ns, tc.class, "Block", leakClaimSize)
			apply(t, c, pod(ns, "old-tenant", fillMarkScript, "persistentVolumeClaim: {claimName: data}", true))
			waitSucceeded(t, c, ns, "old-tenant")
			size := logInt(t, c, ns, "old-tenant", "size")
			if marks := logInt(t, c, ns, "old-tenant", "marks"); marks < size/int64(len(oldTenantMark)+1) {
				t.Fatalf("the first tenant's device holds %d marks after the fill, want %d", marks, size/int64(len(oldTenantMark)+1))
			}
			var oldExtents string
			if tc.linear {
				oldExtents = lvExtents(t, volumeID)
				// Nothing is free in the group but what the claim frees.
				if _, err := onStorage(context.Background(), c, "fill vg", "lvm", "lvcreate", "--config", fixture.LVMConfig,
					"--yes", "--extents", "100%FREE", "--name", "leak-filler", deploy.VG); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if _, err := onStorage(context.Background(), c, "remove filler", "lvm", "lvremove", "--config", fixture.LVMConfig,
						"--yes", deploy.VG+"/leak-filler"); err != nil {
						t.Error(err)
					}
				})
			}
			kubectl(t, c, "delete", "pod", "-n", ns, "old-tenant", "--wait=true", "--timeout=3m")
			deleteClaim(t, c, ns, pv, volumeID, tc.backend, "Block claim "+tc.name)

			_, newID, _ := boundClaimMode(t, c, ns, tc.class, "Block", leakClaimSize)
			if tc.linear {
				if got := lvExtents(t, newID); got != oldExtents {
					t.Fatalf("the new LV has extents %q, the deleted one had %q: the test would not see a leak", got, oldExtents)
				}
				t.Logf("the new LV %s took the deleted LV's extents %s", newID, oldExtents)
			}
			apply(t, c, pod(ns, "new-tenant", readOldScript, "persistentVolumeClaim: {claimName: data}", true))
			waitSucceeded(t, c, ns, "new-tenant")
			if got := logInt(t, c, ns, "new-tenant", "size"); got != size {
				t.Errorf("the new claim's device has %d bytes, the old one's %d", got, size)
			}
			nonzero, marks := logInt(t, c, ns, "new-tenant", "nonzero"), logInt(t, c, ns, "new-tenant", "marks")
			if nonzero != 0 || marks != 0 {
				t.Fatalf("the new tenant reads %d bytes that are not zero and %d lines of the deleted tenant's data", nonzero, marks)
			}
			t.Logf("%s: the new tenant's %d bytes are all zero", tc.name, size)
		})
	}
}

// logInt is the one value of a "key=" line in a pod's log, as a number.
func logInt(t *testing.T, c *cluster.Cluster, ns, name, key string) int64 {
	t.Helper()
	vals := logValues(t, c, ns, name, key)
	if len(vals) != 1 {
		t.Fatalf("the log of %s has %d %s= lines, want 1: %q", name, len(vals), key, vals)
	}
	n, err := strconv.ParseInt(vals[0], 10, 64)
	if err != nil {
		t.Fatalf("the log of %s: %s=%q: %v", name, key, vals[0], err)
	}
	return n
}

// lvExtents is where the LV of a volume lies in the volume group: its
// segments' physical extent ranges, as lvs reports them.
func lvExtents(t *testing.T, volumeID string) string {
	t.Helper()
	out, err := onStorage(context.Background(), lab.c, "lvs", "lvm", "lvs", "--config", fixture.LVMConfig,
		"--noheadings", "--separator", "|", "-o", "lv_name,seg_pe_ranges", deploy.VG)
	if err != nil {
		t.Fatal(err)
	}
	var ranges []string
	for l := range strings.SplitSeq(out, "\n") {
		if name, r, ok := strings.Cut(strings.TrimSpace(l), "|"); ok && strings.Contains(name, volumeID) {
			ranges = append(ranges, strings.TrimSpace(r))
		}
	}
	if len(ranges) == 0 {
		t.Fatalf("no LV of %s in %s:\n%s", volumeID, deploy.VG, out)
	}
	return strings.Join(ranges, " ")
}
