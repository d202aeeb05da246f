package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"
)

// statfsFlags is a statfs that reports flags for every path.
func statfsFlags(flags int64) func(string, *unix.Statfs_t) error {
	return func(_ string, st *unix.Statfs_t) error { st.Flags = flags; return nil }
}

// sysCalls records the mount(2) and umount2(2) calls of a timedMounter;
// fail, when set, decides which fail.
type sysCalls struct {
	calls []string
	fail  func(call string, flags uintptr) error
}

func (r *sysCalls) mounter(statfs func(string, *unix.Statfs_t) error) timedMounter {
	return timedMounter{Interface: mount.NewFakeMounter(nil), timeout: DefaultMountTimeout, statfs: statfs,
		sysMount: func(source, target, fstype string, flags uintptr, data string) error {
			call := fmt.Sprintf("mount %s %s %q %s %q", source, target, fstype, flagNames(flags), data)
			r.calls = append(r.calls, call)
			if r.fail != nil {
				return r.fail(call, flags)
			}
			return nil
		},
		sysUnmount: func(target string, flags int) error {
			r.calls = append(r.calls, fmt.Sprintf("umount %s %d", target, flags))
			return nil
		},
	}
}

// flagNames spells the mount(2) flags the mounter sets.
func flagNames(flags uintptr) string {
	names := []struct {
		bit  uintptr
		name string
	}{
		{unix.MS_REMOUNT, "REMOUNT"}, {unix.MS_BIND, "BIND"}, {unix.MS_REC, "REC"}, {unix.MS_RDONLY, "RDONLY"},
		{unix.MS_NOSUID, "NOSUID"}, {unix.MS_NODEV, "NODEV"}, {unix.MS_NOEXEC, "NOEXEC"},
		{unix.MS_NOATIME, "NOATIME"}, {unix.MS_NODIRATIME, "NODIRATIME"}, {unix.MS_RELATIME, "RELATIME"},
		{unix.MS_SYNCHRONOUS, "SYNC"}, {unix.MS_LAZYTIME, "LAZYTIME"},
	}
	var out []string
	for _, n := range names {
		if flags&n.bit != 0 {
			out = append(out, n.name)
			flags &^= n.bit
		}
	}
	if flags != 0 {
		out = append(out, fmt.Sprintf("%#x", flags))
	}
	if len(out) == 0 {
		return "0"
	}
	return fmt.Sprint(out)
}

func TestTimedMounterCalls(t *testing.T) {
	r := &sysCalls{}
	// The staging mount has nosuid, nodev and noexec (a StorageClass's
	// mountOptions) and relatime.
	m := r.mounter(statfsFlags(unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.ST_RELATIME))
	if err := m.Mount("/dev/nvme1n1", "/staging", "xfs", []string{"noatime", "nouuid", "ro"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("/staging", "/target", "", []string{"bind"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("/staging", "/target-ro", "", []string{"bind", "ro"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Unmount("/target"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		// Flags become flags; what the filesystem parses is its data.
		`mount /dev/nvme1n1 /staging "xfs" [RDONLY NOATIME] "nouuid"`,
		`mount /staging /target "" [BIND] ""`,
		`mount /staging /target-ro "" [BIND] ""`,
		// The remount repeats the flags the bind inherited: mount(2)
		// would clear them otherwise.
		`mount /staging /target-ro "" [REMOUNT BIND RDONLY NOSUID NODEV NOEXEC RELATIME] ""`,
		"umount /target 0",
	}
	if !slices.Equal(r.calls, want) {
		t.Errorf("calls\n %q\nwant\n %q", r.calls, want)
	}
}

func TestMountArgs(t *testing.T) {
	for _, tc := range []struct {
		opts  []string
		flags uintptr
		data  string
	}{
		{nil, 0, ""},
		{[]string{"defaults"}, 0, ""},
		{[]string{"ro", "rw"}, 0, ""},
		{[]string{"noexec", "exec", "nosuid"}, unix.MS_NOSUID, ""},
		{[]string{"rbind"}, unix.MS_BIND | unix.MS_REC, ""},
		{[]string{"discard", "noatime", "errors=remount-ro"}, unix.MS_NOATIME, "discard,errors=remount-ro"},
	} {
		flags, data, err := mountArgs(tc.opts)
		if err != nil || flags != tc.flags || data != tc.data {
			t.Errorf("mountArgs(%q) = %s, %q, %v; want %s, %q", tc.opts, flagNames(flags), data, err, flagNames(tc.flags), tc.data)
		}
	}
	for _, o := range []string{"nofail", "user", "_netdev", "x-systemd.automount"} {
		if _, _, err := mountArgs([]string{o}); err == nil {
			t.Errorf("mountArgs(%q): no error; mount(2) cannot do what mount(8) does with it", o)
		}
	}
}

// A read-only bind whose remount fails must not stay behind read-write.
func TestTimedMounterUndoesBindWhenRemountFails(t *testing.T) {
	r := &sysCalls{fail: func(_ string, flags uintptr) error {
		if flags&unix.MS_REMOUNT != 0 {
			return unix.EPERM
		}
		return nil
	}}
	m := r.mounter(statfsFlags(0))
	if err := m.Mount("/staging", "/target-ro", "", []string{"bind", "ro"}); !errors.Is(err, unix.EPERM) {
		t.Fatalf("Mount = %v, want the remount's EPERM", err)
	}
	want := []string{
		`mount /staging /target-ro "" [BIND] ""`,
		`mount /staging /target-ro "" [REMOUNT BIND RDONLY] ""`,
		"umount /target-ro 0",
	}
	if !slices.Equal(r.calls, want) {
		t.Errorf("calls\n %q\nwant\n %q", r.calls, want)
	}
}

func TestTimedMounterStatfsError(t *testing.T) {
	r := &sysCalls{}
	m := r.mounter(func(string, *unix.Statfs_t) error { return unix.ENOENT })
	if err := m.Mount("/staging", "/target-ro", "", []string{"bind", "ro"}); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("Mount = %v, want ENOENT from statfs", err)
	}
	if len(r.calls) != 0 {
		t.Errorf("calls after statfs failed: %q", r.calls)
	}
}

// A mount(2) that does not return in time is DeadlineExceeded, and the
// caller is not kept waiting for it.
func TestTimedMounterDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	m := timedMounter{Interface: mount.NewFakeMounter(nil), timeout: 50 * time.Millisecond,
		sysUnmount: func(string, int) error { <-release; return nil }}
	if err := m.Unmount("/stuck"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unmount = %v, want DeadlineExceeded", err)
	}
	if code := status.Code(statusOf("unmount", m.Unmount("/stuck"))); code != codes.DeadlineExceeded {
		t.Fatalf("the RPC's code is %v, want DeadlineExceeded", code)
	}
}

func TestMountFlagValidation(t *testing.T) {
	for _, f := range []string{"nofail", "user"} {
		if _, err := validCapability(mountCap("ext4", f)); err == nil {
			t.Errorf("mount flag %q accepted", f)
		}
	}
	if _, err := validCapability(mountCap("ext4", "noatime", "discard")); err != nil {
		t.Errorf("noatime,discard refused: %v", err)
	}
}
