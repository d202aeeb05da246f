//go:build kernel

package guest

import (
	"fmt"
	"os"
	"strings"
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

// A message with no level of its own (the stacks of a soft-lockup report)
// reaches the console, and the report shows every CPU: when a guest
// kernel locks up, the console is all the host gets of it.
func TestLockupReportsReachTheConsole(t *testing.T) {
	RequireGuest(t)
	b, err := os.ReadFile("/proc/sys/kernel/printk")
	if err != nil {
		t.Fatal(err)
	}
	var console, deflt int
	if _, err := fmt.Sscan(string(b), &console, &deflt); err != nil {
		t.Fatalf("/proc/sys/kernel/printk %q: %v", b, err)
	}
	if deflt >= console {
		t.Errorf("/proc/sys/kernel/printk %q: messages with no level get level %d, which the console (below %d) does not show", strings.TrimSpace(string(b)), deflt, console)
	}
	if v, ok := Param("softlockup_all_cpu_backtrace"); !ok || v != "1" {
		t.Errorf("kernel command line lacks softlockup_all_cpu_backtrace=1 (%q, %v)", v, ok)
	}
}
