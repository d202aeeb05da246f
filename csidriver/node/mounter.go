package node

import (
	"context"
	"strings"
	"time"

	mount "k8s.io/mount-utils"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

// DefaultMountTimeout bounds one mount(8) or umount(8). An unmount of a
// filesystem whose device is gone can wait on I/O until the kernel fails
// it (ctrl_loss_tmo); the CO retries after a timeout.
const DefaultMountTimeout = 2 * time.Minute

// DefaultCommandTimeout bounds every other command (mkfs, blkid, resize2fs,
// xfs_growfs): mkfs.xfs discards the whole device first, which on a large
// volume takes minutes.
const DefaultCommandTimeout = 5 * time.Minute

// timedMounter is mount-utils' mounter with Mount and Unmount run through
// the command runner, so that they have a deadline and their process group
// is killed on timeout like every other command pillar-node runs
// (mount-utils starts mount and umount without one). Mount-table queries
// stay with mount-utils.
type timedMounter struct {
	mount.Interface
	run     command.Runner
	timeout time.Duration
}

// Mount mounts like mount-utils: a bind mount with options is a bind
// followed by a remount, because mount(2) ignores other flags on MS_BIND.
func (m timedMounter) Mount(source, target, fstype string, options []string) error {
	bind, bindOpts, remountOpts := mount.MakeBindOpts(options)
	if !bind {
		return m.mount(source, target, fstype, options)
	}
	if err := m.mount(source, target, fstype, bindOpts); err != nil {
		return err
	}
	if len(remountOpts) == len(bindOpts)+1 { // only "remount" added: nothing to change
		return nil
	}
	return m.mount(source, target, fstype, remountOpts)
}

func (m timedMounter) mount(source, target, fstype string, options []string) error {
	var args []string
	if fstype != "" {
		args = append(args, "-t", fstype)
	}
	if len(options) > 0 {
		args = append(args, "-o", strings.Join(options, ","))
	}
	args = append(args, source, target)
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	_, err := m.run.Run(ctx, "mount", args...)
	return err
}

// Unmount unmounts target.
func (m timedMounter) Unmount(target string) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	_, err := m.run.Run(ctx, "umount", target)
	return err
}
