package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

// statfsFlags is a statfs that reports flags for every path.
func statfsFlags(flags int64) func(string, *unix.Statfs_t) error {
	return func(_ string, st *unix.Statfs_t) error { st.Flags = flags; return nil }
}

func TestTimedMounterCommands(t *testing.T) {
	r := &fakeRunner{}
	// The staging mount has nosuid, nodev and noexec (a StorageClass's
	// mountOptions) and relatime.
	m := timedMounter{Interface: mount.NewFakeMounter(nil), run: r, timeout: DefaultMountTimeout,
		statfs: statfsFlags(unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.ST_RELATIME)}
	if err := m.Mount("/dev/nvme1n1", "/staging", "xfs", []string{"noatime"}); err != nil {
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
		"mount -t xfs -o noatime /dev/nvme1n1 /staging",
		"mount -o bind /staging /target",
		"mount -o bind /staging /target-ro",
		// The remount repeats the flags the bind inherited: mount(2)
		// would clear them otherwise.
		"mount -o bind,remount,ro,nosuid,nodev,noexec,relatime /staging /target-ro",
		"umount /target",
	}
	if !slices.Equal(r.calls, want) {
		t.Errorf("commands\n %q\nwant\n %q", r.calls, want)
	}
}

// failingRemount fails every remount and records the commands.
type failingRemount struct{ calls []string }

func (r *failingRemount) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	r.calls = append(r.calls, line)
	if strings.Contains(line, "remount") {
		return nil, &command.Error{Cmd: append([]string{name}, args...), ExitCode: 32, Err: errors.New("exit status 32")}
	}
	return nil, nil
}

// A read-only bind whose remount fails must not stay behind read-write.
func TestTimedMounterUndoesBindWhenRemountFails(t *testing.T) {
	r := &failingRemount{}
	m := timedMounter{Interface: mount.NewFakeMounter(nil), run: r, timeout: DefaultMountTimeout, statfs: statfsFlags(0)}
	err := m.Mount("/staging", "/target-ro", "", []string{"bind", "ro"})
	var ce *command.Error
	if !errors.As(err, &ce) || ce.ExitCode != 32 {
		t.Fatalf("Mount = %v, want the remount's error", err)
	}
	want := []string{
		"mount -o bind /staging /target-ro",
		"mount -o bind,remount,ro /staging /target-ro",
		"umount /target-ro",
	}
	if !slices.Equal(r.calls, want) {
		t.Errorf("commands\n %q\nwant\n %q", r.calls, want)
	}
}

func TestTimedMounterStatfsError(t *testing.T) {
	r := &failingRemount{}
	m := timedMounter{Interface: mount.NewFakeMounter(nil), run: r, timeout: DefaultMountTimeout,
		statfs: func(string, *unix.Statfs_t) error { return unix.ENOENT }}
	if err := m.Mount("/staging", "/target-ro", "", []string{"bind", "ro"}); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("Mount = %v, want ENOENT from statfs", err)
	}
	if len(r.calls) != 0 {
		t.Errorf("commands run after statfs failed: %q", r.calls)
	}
}
