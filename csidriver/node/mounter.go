package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// DefaultMountTimeout bounds one mount(2) or umount2(2). An unmount of a
// filesystem whose device is gone can wait on I/O until the kernel fails
// it (ctrl_loss_tmo); the CO retries after a timeout.
const DefaultMountTimeout = 2 * time.Minute

// DefaultCommandTimeout bounds every other command (mkfs, blkid, resize2fs,
// xfs_growfs): mkfs.xfs discards the whole device first, which on a large
// volume takes minutes.
const DefaultCommandTimeout = 5 * time.Minute

// timedMounter is mount-utils' mounter with Mount and Unmount done with
// mount(2) and umount2(2) instead of mount(8) and umount(8): a command per
// mount cost more than the mount itself. Each call has a deadline; a call
// still in the kernel at its deadline (an unmount waiting on I/O to a
// device that is gone) is left to finish in the background and reported
// as DeadlineExceeded, as a killed mount(8) in uninterruptible sleep would
// be. Mount-table queries (IsMountPoint, List) stay with mount-utils,
// which reads /proc/self/mountinfo and knows its corner cases (a
// corrupted mount's errors, bind mounts of the same device).
type timedMounter struct {
	mount.Interface
	timeout time.Duration
	// statfs reads a source's mount flags; unix.Statfs when nil.
	statfs func(path string, st *unix.Statfs_t) error
	// sysMount and sysUnmount are unix.Mount and unix.Unmount when nil.
	sysMount   func(source, target, fstype string, flags uintptr, data string) error
	sysUnmount func(target string, flags int) error
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

// mountFlagOptions are the options mount(8) turns into mount(2) flags:
// each sets its flags, or clears them (clear). Every other option is the
// filesystem's and goes to mount(2) as its data, as mount(8) passes it.
var mountFlagOptions = map[string]struct {
	flags uintptr
	clear bool
}{
	"ro": {unix.MS_RDONLY, false}, "rw": {unix.MS_RDONLY, true},
	"nosuid": {unix.MS_NOSUID, false}, "suid": {unix.MS_NOSUID, true},
	"nodev": {unix.MS_NODEV, false}, "dev": {unix.MS_NODEV, true},
	"noexec": {unix.MS_NOEXEC, false}, "exec": {unix.MS_NOEXEC, true},
	"sync": {unix.MS_SYNCHRONOUS, false}, "async": {unix.MS_SYNCHRONOUS, true},
	"dirsync": {unix.MS_DIRSYNC, false},
	"noatime": {unix.MS_NOATIME, false}, "atime": {unix.MS_NOATIME, true},
	"nodiratime": {unix.MS_NODIRATIME, false}, "diratime": {unix.MS_NODIRATIME, true},
	"relatime": {unix.MS_RELATIME, false}, "norelatime": {unix.MS_RELATIME, true},
	"strictatime": {unix.MS_STRICTATIME, false}, "nostrictatime": {unix.MS_STRICTATIME, true},
	"lazytime": {unix.MS_LAZYTIME, false}, "nolazytime": {unix.MS_LAZYTIME, true},
	"silent": {unix.MS_SILENT, false}, "loud": {unix.MS_SILENT, true},
	"bind":     {unix.MS_BIND, false},
	"rbind":    {unix.MS_BIND | unix.MS_REC, false},
	"remount":  {unix.MS_REMOUNT, false},
	"defaults": {0, false},
}

// fstabOnlyOptions are options of mount(8) and fstab that mean nothing
// to mount(2) and change how mount(8) itself behaves ("user" implies
// noexec,nosuid,nodev, "nofail" hides errors): refused rather than
// guessed at.
var fstabOnlyOptions = []string{"auto", "noauto", "nofail", "_netdev", "user", "nouser", "users", "owner", "group"}

// mountArgs turns mount(8) options into mount(2)'s flags and data, as
// mount(8) does for the options it knows.
func mountArgs(options []string) (flags uintptr, data string, err error) {
	var fsOpts []string
	for _, o := range options {
		if f, ok := mountFlagOptions[o]; ok {
			if f.clear {
				flags &^= f.flags
			} else {
				flags |= f.flags
			}
			continue
		}
		if slices.Contains(fstabOnlyOptions, o) || strings.HasPrefix(o, "x-") || strings.HasPrefix(o, "X-") {
			return 0, "", fmt.Errorf("mount option %q is one of mount(8)'s own, not the kernel's", o)
		}
		fsOpts = append(fsOpts, o)
	}
	return flags, strings.Join(fsOpts, ","), nil
}

func (m timedMounter) mount(source, target, fstype string, options []string) error {
	flags, data, err := mountArgs(options)
	if err != nil {
		return err
	}
	sys := m.sysMount
	if sys == nil {
		sys = unix.Mount
	}
	err = m.deadline(func() error { return sys(source, target, fstype, flags, data) })
	if err != nil {
		return fmt.Errorf("mount %s on %s (type %q, options %q): %w", source, target, fstype, strings.Join(options, ","), err)
	}
	return nil
}

// Unmount unmounts target.
func (m timedMounter) Unmount(target string) error {
	sys := m.sysUnmount
	if sys == nil {
		sys = unix.Unmount
	}
	if err := m.deadline(func() error { return sys(target, 0) }); err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

// deadline runs call and waits for it at most m.timeout. A call that is
// still in the kernel then stays there (nothing can interrupt it) and its
// result is dropped; the error wraps context.DeadlineExceeded.
func (m timedMounter) deadline(call func() error) error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	t := time.NewTimer(m.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("still in the kernel after %v: %w", m.timeout, context.DeadlineExceeded)
	}
}
