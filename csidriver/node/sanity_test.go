package node

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
	"github.com/pillar-csi/pillar-csi/csidriver/endpoint"
	"github.com/pillar-csi/pillar-csi/csidriver/identity"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/envtestsuite"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// TestSanity runs every csi-sanity spec (Identity, Controller, Node)
// against pillar-node's Node service and pillar-controller's real
// Controller service, the latter on a real kube-apiserver (as the
// controller's RBAC user) with an in-process agent whose exports appear in
// the node's fake initiator tree: the one data path no process here can
// run for real (the kernel-lab suites do).
func TestSanity(t *testing.T) {
	e := newEnv(t)
	ctrl := realController(t, e)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := endpoint.Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	g := endpoint.New(endpoint.Services{
		Identity:   identity.New(e.svc.Ready, true),
		Node:       e.svc,
		Controller: ctrl,
	}, e.svc.log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- endpoint.Serve(ctx, g, l, time.Second) }()
	defer func() { cancel(); <-done }()

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	// In the env's kubelet directory, where pillar-node accepts them
	// (csi-sanity makes each with mkdir, not mkdir -p).
	cfg.TargetPath = filepath.Join(e.dir, "sanity-target")
	cfg.StagingPath = filepath.Join(e.dir, "sanity-staging")
	cfg.TestVolumeSize = gib
	cfg.TestVolumeExpandSize = 2 * gib
	cfg.IdempotentCount = 2
	cfg.TestVolumeParameters = map[string]string{v1alpha1.StorageClassParamStore: "tank", v1alpha1.StorageClassParamProtocol: "tcp"}
	sc := sanity.GinkgoTest(&cfg)
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	reporter.Succinct = true
	reporter.NoColor = true
	ginkgo.RunSpecs(t, "pillar-csi csi-sanity", suite, reporter)
	sc.Finalize()
}

// realController is pillar-controller's Controller service on a fresh API
// server, with one agent, store and protocol; whatever the agent exports
// shows up as a target in the node's fake initiator tree.
func realController(t *testing.T, e *env) *controller.Service {
	t.Helper()
	cluster, err := envtestsuite.Start(filepath.Join("..", "..", "api", "config", "crd"), filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	user, err := client.New(cluster.User, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := fakeagent.Start(fakeagent.Options{NodeName: "storage-1", Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	if err := agent.EnableVolumes(t.TempDir(), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.CloseVolumes)
	agent.SetStore("tank", fakeagent.Capacity{Total: 100 * gib, Available: 100 * gib})
	agent.SetHooks(fakeagent.Hooks{
		Exported: func(id, addr string, port uint16, size int64) { e.fake.Export(id, addr, port, size) },
		Grown:    e.fake.Grow,
	})
	ctx := context.Background()
	for _, o := range []client.Object{
		&v1alpha1.PillarAgent{ObjectMeta: metav1.ObjectMeta{Name: "storage-1"}, Spec: v1alpha1.PillarAgentSpec{Address: "127.0.0.1", Port: agent.Port()}},
		&v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: "tank"}, Spec: v1alpha1.PillarStoreSpec{AgentName: "storage-1", Type: v1alpha1.BackendZFS,
			ZFS: &v1alpha1.ZFSStore{Pool: "tank"}}},
		&v1alpha1.PillarProtocol{ObjectMeta: metav1.ObjectMeta{Name: "tcp"}, Spec: v1alpha1.PillarProtocolSpec{Type: v1alpha1.ProtocolNVMeOFTCP,
			NVMeOFTCP: &v1alpha1.NVMeOFTCPProtocol{BindAddress: "192.0.2.10", Port: 4420}}},
	} {
		if err := cluster.Admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pool := agentclient.NewPool(agentclient.Options{})
	t.Cleanup(pool.Close)
	return controller.New(controller.Config{Client: user, Reader: user, Connector: &reconcile.Connector{Client: user, Pool: pool},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}
