package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
	// statfs reads a source's mount flags; unix.Statfs when nil.
	statfs func(path string, st *unix.Statfs_t) error
}

// Mount mounts like mount-utils: a bind mount with options is a bind
// followed by a remount, because mount(2) ignores other flags on MS_BIND.
//
// The remount (MS_REMOUNT|MS_BIND) sets the new mount's flags to exactly
// those given, so nosuid, nodev, noexec and the atime flags that the bind
// inherited from the source's mount (the staging mount's mount flags, or
// /dev's) would be cleared by a plain "bind,remount,ro". They are read
// from the source with statfs and repeated, as mount-utils' own Mount
// does. A failed remount undoes the bind: left in place, a read-write
// bind of a read-only publication would be taken by the CO's retry for
// the finished publication.
func (m timedMounter) Mount(source, target, fstype string, options []string) error {
	bind, bindOpts, remountOpts := mount.MakeBindOpts(options)
	if !bind {
		return m.mount(source, target, fstype, options)
	}
	if len(remountOpts) == len(bindOpts)+1 { // only "remount" added: nothing to change
		return m.mount(source, target, fstype, bindOpts)
	}
	inherited, err := m.mountFlags(source)
	if err != nil {
		return err
	}
	if err := m.mount(source, target, fstype, bindOpts); err != nil {
		return err
	}
	if err := m.mount(source, target, fstype, append(remountOpts, inherited...)); err != nil {
		if uerr := m.Unmount(target); uerr != nil {
			return errors.Join(err, fmt.Errorf("undo the bind mount: %w", uerr))
		}
		return err
	}
	return nil
}

// inheritedFlags are the per-mount flags a bind mount copies from its
// source's mount, by their statfs bit (the ST_* bits equal the MS_* ones).
var inheritedFlags = []struct {
	bit uint64
	opt string
}{
	{unix.ST_NOSUID, "nosuid"},
	{unix.ST_NODEV, "nodev"},
	{unix.ST_NOEXEC, "noexec"},
	{unix.ST_NOATIME, "noatime"},
	{unix.ST_NODIRATIME, "nodiratime"},
	{unix.ST_RELATIME, "relatime"},
	{unix.ST_RDONLY, "ro"},
}

// mountFlags returns the mount options of the flags the mount under path
// carries.
func (m timedMounter) mountFlags(path string) ([]string, error) {
	statfs := m.statfs
	if statfs == nil {
		statfs = unix.Statfs
	}
	var st unix.Statfs_t
	if err := statfs(path, &st); err != nil {
		return nil, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	var opts []string
	for _, f := range inheritedFlags {
		if uint64(st.Flags)&f.bit != 0 {
			opts = append(opts, f.opt)
		}
	}
	return opts, nil
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
