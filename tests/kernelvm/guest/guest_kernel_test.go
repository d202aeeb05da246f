//go:build kernel

package guest

import (
	"os"
	"testing"
)

// Inside the lab the marker is present and the kernel facilities the lab
// promises are there.
func TestInLab(t *testing.T) {
	RequireGuest(t)
	if !InLab() {
		t.Fatal("RequireGuest passed but InLab is false")
	}
	for _, p := range []string{"/sys/kernel/config/nvmet", "/dev/nvme-fabrics", "/dev/zfs", "/dev/mapper/control", "/dev/loop-control"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%v", err)
		}
	}
}
