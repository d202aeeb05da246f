//go:build kernel

package pillar_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// lab is the run's one cluster, its storage, and the install of the
// driver, shared by every test: a cluster start takes minutes of guest
// time under TCG.
var lab struct {
	root    string
	c       *cluster.Cluster
	storage *deploy.Storage
	err     error

	installOnce sync.Once
	installErr  error
}

// attachFile names the attach state of a kept cluster (make e2e-up): the
// binary then runs its tests against that cluster, which another process
// of the guest owns, instead of starting one of its own. make e2e-run
// passes it.
var importImages = flag.Bool("cluster.import", false, "import the chart's images into containerd at the cluster's start instead of pushing them to the lab registry for the kubelet to pull")

var attachFile = flag.String("cluster.attach", "", "attach to the kept cluster whose state file this is instead of starting a cluster (make e2e-run passes it)")

func TestMain(m *testing.M) {
	// The suite's controller-runtime client (disrupt_test.go) logs through
	// this: its warnings reach the run's output, and it no longer prints
	// "log.SetLogger(...) was never called" with a stack on first use.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn})))
	// The peer guest of a two-guest run is the storage node: it runs no
	// test, it serves until the host powers it off.
	if guest.Role() == guest.RolePeer {
		root, err := cluster.RepoRoot()
		if err == nil {
			err = deploy.ServeStorageNode(context.Background(), root, os.Stdout)
		}
		fmt.Fprintf(os.Stdout, "pillar-e2e: storage node: %v\n", err)
		os.Exit(1)
	}
	flag.Parse()
	// Outside the guest, the tests fail through RequireGuest (never skip),
	// so there is nothing to start.
	if guest.InLab() && *attachFile != "" {
		// The kept cluster's owner made its pools too, and keeps them.
		lab.root, lab.err = cluster.RepoRoot()
		if lab.err == nil {
			lab.c, lab.err = cluster.Attach(*attachFile, os.Stdout)
		}
		if lab.err == nil {
			fmt.Fprintf(os.Stdout, "pillar-e2e: attached to the kept cluster of %s (node %s, guest uptime %.1fs), %d MiB used\n",
				*attachFile, lab.c.NodeName, cluster.Uptime().Seconds(), cluster.MemUsedMiB())
		}
	} else if guest.InLab() {
		lab.root, lab.err = cluster.RepoRoot()
		if lab.err == nil {
			t0 := time.Now()
			o := cluster.Options{
				BinDir:       filepath.Join(lab.root, "bin"),
				ImageDir:     filepath.Join(lab.root, "bin", "images"),
				Log:          os.Stdout,
				ImportImages: *importImages,
			}
			if guest.Role() == guest.RoleMain {
				o.PeerName = deploy.StorageNodeName
			}
			lab.c, lab.err = cluster.Start(context.Background(), o)
			if lab.err == nil {
				fmt.Fprintf(os.Stdout, "pillar-e2e: cluster started in %.1fs (guest uptime %.1fs), %d MiB used\n",
					time.Since(t0).Seconds(), cluster.Uptime().Seconds(), cluster.MemUsedMiB())
				cluster.WriteCPUTop(os.Stdout, 12)
				go cluster.WatchCPU(context.Background(), os.Stdout, 5*time.Minute, 8)
			}
		}
		// In a two-guest run the pools are the peer's own.
		if lab.err == nil && lab.c.PeerName == "" {
			lab.storage, lab.err = deploy.NewStorage(context.Background(), os.Stdout)
		}
	}
	code := m.Run()
	fmt.Fprintf(os.Stdout, "pillar-e2e: figures:\n%s", summary())
	if lab.c != nil {
		if code != 0 {
			deploy.Diagnose(os.Stdout, lab.c)
			lab.c.Dump(os.Stdout)
		}
		fmt.Fprintf(os.Stdout, "pillar-e2e: guest memory in use at the end: %d MiB\n", cluster.MemUsedMiB())
		cluster.WriteCPUTop(os.Stdout, 25)
		t0 := time.Now()
		if lab.c.Attached() {
			fmt.Fprintf(os.Stdout, "cluster: kept running for the next run (make e2e-down stops it)\n")
		} else if err := lab.c.Stop(); err != nil {
			fmt.Fprintf(os.Stdout, "cluster: teardown: %v\n", err)
			code = 1
		} else {
			fmt.Fprintf(os.Stdout, "cluster: torn down in %.1fs\n", time.Since(t0).Seconds())
		}
	}
	if lab.storage != nil {
		// What the driver left behind keeps the pool or the VG busy; the
		// tests that delete volumes already check that nothing is left,
		// so this only reports.
		lab.storage.Close(os.Stdout)
	}
	os.Exit(code)
}

// setup returns the shared cluster with pillar-csi installed and the
// examples applied, or fails the test.
func setup(t *testing.T) *cluster.Cluster {
	t.Helper()
	c := clusterOnly(t)
	installOnce(c)
	if lab.installErr != nil {
		t.Fatalf("pillar-csi is not installed: %v", lab.installErr)
	}
	return c
}

// installValues is a values file applied after the lab's, e.g. to
// measure TestPerformance with another provisioner timeout than the
// chart's (make e2e-perf E2EFLAGS=-install.values=FILE).
var installValues = flag.String("install.values", "", "a Helm values file applied after the lab's when the chart is installed")

// installOnce installs the driver the first time it is called. The
// install's record (helm's output, what kubectl get shows at each step)
// goes to the run's output as it happens: an install can take many
// minutes in a busy guest.
func installOnce(c *cluster.Cluster) {
	lab.installOnce.Do(func() {
		// A kept cluster keeps the install of the run that made it.
		if c.Attached() {
			ok, err := deploy.Installed(context.Background(), c)
			if err != nil || ok {
				if ok {
					fmt.Fprintf(os.Stdout, "pillar-e2e: the kept cluster has release %s installed: not installing again\n", deploy.Release)
				}
				lab.installErr = err
				return
			}
		}
		var extra []string
		if *installValues != "" {
			extra = append(extra, *installValues)
		}
		lab.installErr = deploy.Install(context.Background(), c, lab.root, os.Stdout, extra...)
		cluster.WriteCPUTop(os.Stdout, 12)
	})
}

// clusterOnly returns the shared cluster (without installing the driver)
// or fails the test.
func clusterOnly(t *testing.T) *cluster.Cluster {
	t.Helper()
	guest.RequireGuest(t)
	if lab.err != nil {
		t.Fatalf("the lab did not start: %v", lab.err)
	}
	if lab.c == nil {
		t.Fatal("the lab cluster did not start")
	}
	return lab.c
}
