//go:build kernel

package controller

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/pillar-csi/pillar-csi/tests/csisanity"
)

const (
	// sanityVolumeSize is what csi-sanity creates its volumes with. The
	// StorageClass's filesystem is ext4 (mkfs.xfs would refuse anything
	// under 300 MB); a few specs hold several volumes at once, all in a
	// 1 GiB zpool or an 800 MiB thin pool.
	sanityVolumeSize = 64 * mib
	// sanityExpandSize is what the expansion specs grow a volume to.
	sanityExpandSize = 128 * mib
)

// TestCSISanity runs every spec of csi-sanity (csi-test v5, the version
// csidriver pins) against the real stack: pillar-controller's CSI socket
// for the Identity and Controller services, a bin/pillar-node process's
// for the Node service, with the parameters of the StorageClass a
// PillarStorageClass generated, once for a ZFS store and once for an LVM
// thin store. csi-sanity publishes to the node ID pillar-node reports, so
// every ControllerPublishVolume puts that node's host NQN on the
// subsystem's allowed_hosts and every NodeStageVolume connects the guest's
// kernel initiator, makes ext4 and mounts it. csi-sanity's node address
// is a router (csiRouter) that hands the Node methods to pillar-node and
// the Identity and Controller methods to pillar-controller: csi-sanity
// asks that address's Identity whether a Controller service exists, and
// without one it stages volumes it never published, which the subsystem's
// host ACL rightly refuses. Ginkgo's report says how many specs passed,
// failed and were skipped; each skip is logged with its reason (a
// capability pillar-csi does not offer).
func TestCSISanity(t *testing.T) {
	l := setup(t)
	s := newStack(t, l, "storage-sanity", backendZFS, backendLVMThin)
	w := s.startWorker("worker-sanity")
	router := csisanity.StartRouter(t, t.TempDir(), l.csiEndpoint, "unix://"+filepath.Join(w.dir, "csi.sock"), csiTimeout)
	began := time.Now()

	var contexts []*sanity.TestContext
	for _, k := range []string{backendZFS, backendLVMThin} {
		st := s.stores[k]
		// Under the worker's kubelet directory, where pillar-node
		// accepts staging and target paths.
		dir := filepath.Join(w.dir, "sanity-"+k)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := sanity.NewTestConfig()
		cfg.Address = router.Endpoint
		cfg.ControllerAddress = l.csiEndpoint
		cfg.TargetPath = filepath.Join(dir, "target")
		cfg.StagingPath = filepath.Join(dir, "staging")
		cfg.TestVolumeSize = sanityVolumeSize
		cfg.TestVolumeExpandSize = sanityExpandSize
		cfg.TestVolumeParameters = st.params
		cfg.IdempotentCount = 2
		// Registering the suite inside a container of its own makes one
		// Ginkgo run (RunSpecs may be called once per process) cover both
		// stores, each spec named after its store.
		ginkgo.Describe(st.kind, func() {
			contexts = append(contexts, sanity.GinkgoTest(&cfg))
		})
	}
	ginkgo.ReportAfterSuite("pillar-csi csi-sanity counts", func(r types.Report) { csisanity.LogReport(t, r) })
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	// Specs run in the order they are written, so a failure is easy to
	// match with the controller's and node's logs.
	suite.RandomizeAllSpecs = false
	suite.Timeout = 2 * time.Hour
	reporter.Succinct = true
	reporter.NoColor = true
	ginkgo.RunSpecs(t, "pillar-csi csi-sanity (real stack)", suite, reporter)
	for _, sc := range contexts {
		sc.Finalize()
	}
	t.Logf("csi-sanity on ZFS and LVM thin took %v (guest time)", time.Since(began).Round(time.Second))
	for _, k := range []string{backendZFS, backendLVMThin} {
		if ids := s.stores[k].backendVolumes(t); len(ids) != 0 {
			t.Errorf("csi-sanity left volumes in the %s store: %v", k, ids)
		}
	}
}
