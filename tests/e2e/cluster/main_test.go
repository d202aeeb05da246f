//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// lab is the one cluster of this run: booting it takes most of a minute
// of guest time, so every test shares it and works in its own namespace.
var lab struct {
	c   *cluster.Cluster
	err error
}

func TestMain(m *testing.M) {
	// Outside the guest, the tests fail through RequireGuest (never skip),
	// so there is nothing to start.
	if guest.InLab() {
		root, err := cluster.RepoRoot()
		if err == nil {
			lab.c, lab.err = cluster.Start(context.Background(), cluster.Options{
				BinDir:   filepath.Join(root, "bin"),
				ImageDir: filepath.Join(root, "bin", "images"),
				Log:      os.Stdout,
			})
		} else {
			lab.err = err
		}
	}
	code := m.Run()
	if lab.c != nil {
		if code != 0 {
			lab.c.Dump(os.Stdout)
		}
		t0 := time.Now()
		if err := lab.c.Stop(); err != nil {
			fmt.Fprintf(os.Stdout, "cluster: teardown: %v\n", err)
			code = 1
		} else {
			fmt.Fprintf(os.Stdout, "cluster: torn down in %.1fs\n", time.Since(t0).Seconds())
		}
	}
	os.Exit(code)
}

// setup returns the shared cluster or fails the test.
func setup(t *testing.T) *cluster.Cluster {
	t.Helper()
	guest.RequireGuest(t)
	if lab.err != nil {
		t.Fatalf("the lab cluster did not start: %v", lab.err)
	}
	if lab.c == nil {
		t.Fatal("the lab cluster did not start")
	}
	return lab.c
}
