package deploy

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// StorageNodeName is the node the peer guest of a two-guest run joins as.
const StorageNodeName = "pillar-storage"

// The peer's disks (pillar-lab test -peer-disks, make e2e-two): the
// zpool's, the volume group's and the node's state. They are raw images on the host, so the
// pools survive the peer's power cut as a real storage node's disks do.
const (
	zpoolDisk = "/dev/vda"
	vgDisk    = "/dev/vdb"
	// stateDisk holds the node's own state under stateDir: the agent's
	// fencing marks (the chart's agent.generationsDir) must survive a
	// power cut, or every token would look new after one.
	stateDisk = "/dev/vdc"
	stateDir  = "/var/lib/pillar-csi"
)

// peerImages are the images the storage node runs: the agent's and the
// node plugin's DaemonSets (the controller runs on the main guest's node).
var peerImages = []string{"pillar-agent", "pillar-node"}

// ServeStorageNode is what the peer guest of a two-guest run does on every
// boot, as a storage node's own boot would: it mounts its state disk and
// imports the pools found on its disks (creating them on the first boot),
// joins the main guest's
// cluster, and serves (importing the images the main guest hands it)
// until the host powers it off. It returns only on failure.
func ServeStorageNode(ctx context.Context, root string, log io.Writer) error {
	c, err := cluster.Join(ctx, cluster.JoinOptions{
		BinDir:   filepath.Join(root, "bin"),
		ImageDir: filepath.Join(root, "bin", "images"),
		Images:   peerImages,
		BeforeKubelet: func(ctx context.Context) error {
			if err := openPools(ctx, log); err != nil {
				return fmt.Errorf("the storage node's pools: %w", err)
			}
			return nil
		},
		Log: log,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "pillar-e2e: storage node %s serving; guest uptime %.1fs, %d MiB used\n",
		c.NodeName, cluster.Uptime().Seconds(), cluster.MemUsedMiB())
	return c.ServeImports(ctx)
}

// openPools imports the zpool and activates the volume group on the
// peer's disks, or creates them on disks that hold neither yet.
func openPools(ctx context.Context, log io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := fixture.Command(ctx, "probe the state disk", "blkid", stateDisk); err != nil {
		fmt.Fprintf(log, "pillar-e2e: no filesystem on %s (%v): making one\n", stateDisk, err)
		if _, err := fixture.Command(ctx, "mkfs the state disk", "mkfs.ext4", "-q", stateDisk); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	if _, err := fixture.Command(ctx, "mount the state disk", "mount", stateDisk, stateDir); err != nil {
		return err
	}
	// The pool's vdev is a loop device over the disk: on a whole disk
	// zpool create writes a partition table and then waits for udev,
	// which the guest does not run, to show it the partition. A loop
	// device it takes as it is, and it maps the disk one to one, so the
	// pool's labels are where the next boot's loop device finds them.
	out, err := fixture.Command(ctx, "attach loop device", "losetup", "--find", "--show", zpoolDisk)
	if err != nil {
		return err
	}
	vdev := strings.TrimSpace(out)
	// -f: the pool was not exported; its last user was this node
	// before the power cut.
	if _, err := fixture.Command(ctx, "import zpool", "zpool", "import", "-f", "-d", vdev, "-o", "cachefile=none", ZPool); err != nil {
		fmt.Fprintf(log, "pillar-e2e: no zpool %s to import (%v): creating it on %s (%s)\n", ZPool, err, zpoolDisk, vdev)
		if err := createZpool(ctx, vdev); err != nil {
			return err
		}
	}
	if out, err := fixture.LVM(ctx, "vgs", "--noheadings", "-o", "vg_name", VG); err == nil && strings.TrimSpace(out) == VG {
		if _, err := fixture.LVM(ctx, "vgchange", "--activate", "y", VG); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(log, "pillar-e2e: no volume group %s (%v): creating it on %s\n", VG, err, vgDisk)
		if err := createVG(ctx, vgDisk); err != nil {
			return err
		}
	}
	out, _ = fixture.Command(ctx, "list zvols", "zfs", "list", "-H", "-o", "name", "-t", "volume", "-r", ZPool)
	lvs, _ := fixture.LVM(ctx, "lvs", "--noheadings", "-o", "lv_name", VG)
	marks, _ := fixture.Command(ctx, "list fencing marks", "find", stateDir, "-type", "f")
	fmt.Fprintf(log, "pillar-e2e: storage: zpool %s on %s, VG %s on %s, %s on %s; zvols: %s; LVs: %s; files under %s: %d\n",
		ZPool, zpoolDisk, VG, vgDisk, stateDir, stateDisk, strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(lvs), " "),
		stateDir, len(strings.Fields(marks)))
	return nil
}
