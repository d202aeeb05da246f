package kept

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// KeepOptions say what the keeper in the guest keeps.
type KeepOptions struct {
	Channel Channel
	// Root is the workspace root: its bin/ holds the cluster's binaries
	// and bin/images the images, as for the pillar suite's own start.
	Root string
	// Lifetime ends the kept cluster cleanly if the host never asks;
	// the supervisor's limit on QEMU is a little longer.
	Lifetime time.Duration
	Log      io.Writer
}

// AttachFlag is the pillar suite's flag that names the attach state.
const AttachFlag = "-cluster.attach"

// Keep starts the cluster and the storage pools as the pillar suite's
// TestMain does, reports them ready through the channel, serves the
// host's requests until it is asked to stop or its lifetime ends, and
// tears the cluster and the pools down. A start that fails is reported
// through the channel's failed file.
func Keep(ctx context.Context, o KeepOptions) (err error) {
	if !guest.InLab() {
		return errors.New("keep a lab cluster: not in the kernel lab's guest")
	}
	ch := o.Channel
	defer func() {
		if err != nil {
			if werr := guest.WriteFileAtomic(ch.path(failedFile), []byte(err.Error()+"\n")); werr != nil {
				fmt.Fprintf(o.Log, "kept: report the failure: %v\n", werr)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, o.Lifetime)
	defer cancel()
	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		BinDir:   filepath.Join(o.Root, "bin"),
		ImageDir: filepath.Join(o.Root, "bin", "images"),
		Log:      o.Log,
	})
	if err != nil {
		return err
	}
	var storage *deploy.Storage
	// As the suite's TestMain: the cluster (the driver's pods and their
	// exports) first, then the pools they used.
	defer func() {
		if serr := c.Stop(); serr != nil {
			fmt.Fprintf(o.Log, "kept: cluster teardown: %v\n", serr)
			err = errors.Join(err, serr)
		}
		if storage != nil {
			storage.Close(o.Log)
		}
		fmt.Fprintf(o.Log, "kept: cluster torn down\n")
	}()
	if storage, err = deploy.NewStorage(ctx, o.Log); err != nil {
		return err
	}
	attach := filepath.Join(c.AttachState().StateDir, "attach.json")
	if err := c.WriteAttachState(attach); err != nil {
		return err
	}
	r := Ready{Attach: attach, NodeName: c.NodeName, Uptime: cluster.Uptime().Seconds(), MemMiB: cluster.MemUsedMiB()}
	if err := writeJSON(ch.path(readyFile), r); err != nil {
		return fmt.Errorf("report the cluster ready: %w", err)
	}
	fmt.Fprintf(o.Log, "kept: cluster and pools ready in %.1fs (guest uptime %.1fs, %d MiB used); serving %s until asked to stop or %v\n",
		time.Since(t0).Seconds(), r.Uptime, r.MemMiB, ch.Dir, time.Now().Add(time.Until(deadline(ctx))).Format(time.TimeOnly))
	err = ch.Serve(ctx, []string{AttachFlag + "=" + attach}, o.Log, 500*time.Millisecond)
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(o.Log, "kept: lifetime of %v over: stopping the cluster\n", o.Lifetime)
		err = nil
	}
	fmt.Fprintf(o.Log, "kept: stopping the cluster (%d MiB used)\n", cluster.MemUsedMiB())
	return err
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// Main is the keeper's command: its exit status is the guest's.
func Main(ctx context.Context, o KeepOptions) int {
	if o.Log == nil {
		o.Log = os.Stdout
	}
	if err := Keep(ctx, o); err != nil {
		fmt.Fprintf(o.Log, "kept: %v\n", err)
		return 1
	}
	return 0
}
