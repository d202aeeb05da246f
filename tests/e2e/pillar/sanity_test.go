//go:build kernel

package pillar_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/pillar-csi/pillar-csi/tests/csisanity"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
)

// kubeletDir is the chart's kubeletDir: pillar-node's socket is in
// plugins/pillar-csi.io under it, and it sees the whole directory at the
// same path, so csi-sanity's staging and target paths there are paths
// pillar-node can mount on.
const kubeletDir = "/var/lib/kubelet"

// TestCSISanity runs every spec of csi-sanity (csi-test v5) against the
// driver as the chart installed it: the CSI socket of a pillar-controller
// pod (in its socket-dir emptyDir, where the sidecars reach it) and
// pillar-node's socket on the node, joined into one endpoint by
// csisanity.Router, with the parameters of the StorageClass zfs-nvmeof
// the PillarStorageClass generated. Every volume it makes goes through the
// real agent, nvmet and the node's kernel initiator; it must pass every
// applicable spec and leave no zvol behind. Each skip is logged with its
// reason.
func TestCSISanity(t *testing.T) {
	c := setup(t)
	pod := kubectl(t, c, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=controller", "-o", "jsonpath={.items[0].metadata.uid}")
	ctrlSock := filepath.Join(kubeletDir, "pods", pod, "volumes", "kubernetes.io~empty-dir", "socket-dir", "csi.sock")
	nodeSock := filepath.Join(kubeletDir, "plugins", "pillar-csi.io", "csi.sock")
	for _, s := range []string{ctrlSock, nodeSock} {
		if _, err := os.Stat(s); err != nil {
			t.Fatalf("the installed driver's socket: %v", err)
		}
	}
	var params map[string]string
	if err := json.Unmarshal([]byte(kubectl(t, c, "get", "storageclass", "zfs-nvmeof", "-o", "jsonpath={.parameters}")), &params); err != nil {
		t.Fatalf("the parameters of StorageClass zfs-nvmeof: %v", err)
	}
	t.Logf("csi-sanity: controller %s, node %s, parameters %v", ctrlSock, nodeSock, params)
	before := zvolCount(t)

	dir, err := os.MkdirTemp(filepath.Join(kubeletDir, "plugins", "pillar-csi.io"), "sanity-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The controller's socket path is longer than a socket address may be
	// (108 bytes): clients connect through a short symlink to it.
	short := filepath.Join(t.TempDir(), "controller.sock")
	if err := os.Symlink(ctrlSock, short); err != nil {
		t.Fatal(err)
	}
	router := csisanity.StartRouter(t, t.TempDir(), "unix://"+short, "unix://"+nodeSock, 3*time.Minute)
	cfg := sanity.NewTestConfig()
	cfg.Address = router.Endpoint
	cfg.ControllerAddress = "unix://" + short
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	// ext4 (the class's fsType) fits in 64 MiB; a few specs hold several
	// volumes at once in the 1 GiB pool.
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	cfg.TestVolumeParameters = params
	cfg.IdempotentCount = 2
	var sc *sanity.TestContext
	ginkgo.Describe("zfs-nvmeof", func() { sc = sanity.GinkgoTest(&cfg) })
	ginkgo.ReportAfterSuite("pillar-csi csi-sanity counts", func(r types.Report) { csisanity.LogReport(t, r) })
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	suite.RandomizeAllSpecs = false
	suite.Timeout = time.Hour
	reporter.Succinct = true
	reporter.NoColor = true
	t0 := time.Now()
	ginkgo.RunSpecs(t, "pillar-csi csi-sanity (installed with the chart)", suite, reporter)
	sc.Finalize()
	record(t, "csi-sanity on the installed driver", time.Since(t0))
	if after := zvolCount(t); after != before {
		out, _ := zvolList(t.Context())
		t.Errorf("csi-sanity left %d zvols behind (%d before, %d after):\n%s", after-before, before, after, strings.TrimSpace(out))
	}
}
