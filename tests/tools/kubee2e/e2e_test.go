// Package e2e is the Kubernetes storage end-to-end suite for an external
// CSI driver, built from k8s.io/kubernetes as released: `go test -c` of
// this package is bin/e2e.test (make e2e-test-binary). It links the
// external-storage specs (test/e2e/storage/external), which the driver
// file given with -storage.testdriver defines, and none of upstream's
// suites besides; test/e2e/storage/testsuites still brings in, through
// the framework's statefulset and manifest helpers, the common node and
// storage specs of test/e2e/common (582 of the 722 specs with pillar-csi's
// driver file), so a run names its specs with -ginkgo.focus
// (External.Storage for all of the driver's).
//
// The flags, the Ginkgo configuration and the suite setup are those of
// test/e2e/e2e_test.go and test/e2e/e2e.go of the pinned release, less
// what only the other suites or the cloud providers need.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// Defines "External Storage [Driver: ...]" for each -storage.testdriver
	// file while the flags are parsed.
	_ "k8s.io/kubernetes/test/e2e/storage/external"

	// As upstream's suite: dump the namespace's events and pod logs when
	// a spec fails, and check after each spec that every node is still
	// Ready.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	// The logging flags (-v, -vmodule) on the command line.
	_ "k8s.io/component-base/logs/testinit"
)

func TestMain(m *testing.M) {
	showVersion := flag.CommandLine.Bool("version", false, "Print the Kubernetes version the suite was built from and exit.")
	// Order matters: config.CopyFlags registers -storage.testdriver, whose
	// Set defines the specs; the framework's own flags come after it, as
	// in upstream's handleFlags.
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown arguments: %v\n", flag.CommandLine.Args())
		os.Exit(2)
	}
	// The manifests some storage specs load (the volume populator CRD of
	// "any volume data source", for one) are embedded, so the binary
	// needs no checkout of kubernetes beside it.
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	// As upstream's RunE2ETests: InitLogs turns contextual logging off,
	// which the framework's logging relies on, so it is turned back on.
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	// CreateGinkgoConfig starts from the -ginkgo.* flags and adds what the
	// framework needs (its default timeout, the -report-dir JUnit file).
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes external storage e2e suite", suiteConfig, reporterConfig)
}

// The part of upstream's setupSuite that the storage specs depend on:
// every node schedulable before the first spec, and the node count
// (-num-nodes) taken from the cluster when it is not given, which the
// multi-node specs use to decide whether they can run.
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "load the client of the cluster under test")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
	framework.Logf("e2e test version: %s", version.Get().GitVersion)
	if v, err := c.Discovery().ServerVersion(); err != nil {
		framework.Logf("kube-apiserver version: unknown: %v", err)
	} else {
		framework.Logf("kube-apiserver version: %s", v.GitVersion)
	}
	framework.Logf("schedulable nodes: %d", framework.TestContext.CloudConfig.NumNodes)
	return nil
}, func(ctx context.Context, _ []byte) {})
