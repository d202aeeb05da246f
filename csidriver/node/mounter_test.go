package node

import (
	"slices"
	"testing"

	mount "k8s.io/mount-utils"
)

func TestTimedMounterCommands(t *testing.T) {
	r := &fakeRunner{}
	m := timedMounter{Interface: mount.NewFakeMounter(nil), run: r, timeout: DefaultMountTimeout}
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
		"mount -o bind,remount,ro /staging /target-ro",
		"umount /target",
	}
	if !slices.Equal(r.calls, want) {
		t.Errorf("commands\n %q\nwant\n %q", r.calls, want)
	}
}
