//go:build kernel

package kerneltest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/configfs"
)

// A grown device reaches a connected initiator only through
// RevalidateSize: nvmet keeps the size it read when the namespace was
// enabled. A disabled namespace refuses the revalidation (EINVAL); a
// namespace or subsystem that does not exist is IsNotExist.
func TestRevalidateSize(t *testing.T) {
	fs, ctx := start(t)
	host := hostNQN()
	loop := newLoop(t, 16)
	e := simpleExport(subsysNQN(t, 1), loop, loopback(freePort()), host)
	mustApply(t, fs, ctx, e)
	mustConnect(t, e.Ports[0], e.NQN, host)
	dev := blockDevice(t, e.Namespaces[0].DeviceUUID)
	size := func() int64 {
		b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "size"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n * 512
	}
	if got := size(); got != 16<<20 {
		t.Fatalf("the initiator's %s has %d bytes, want 16 MiB", dev, got)
	}

	// Grow the loop device: its backing file, then the device.
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(loop), "loop", "backing_file"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(strings.TrimSpace(string(b)), 32<<20); err != nil {
		t.Fatal(err)
	}
	run(t, "losetup", "-c", loop)
	time.Sleep(2 * time.Second)
	if got := size(); got != 16<<20 {
		t.Fatalf("the initiator saw %d bytes before any revalidation; nvmet is expected to keep the size it read at enable", got)
	}
	if err := fs.RevalidateSize(ctx, e.NQN, 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for size() != 32<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the initiator's %s still has %d bytes 20 s after RevalidateSize, want 32 MiB", dev, size())
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := fs.RevalidateSize(ctx, e.NQN, 2); !configfs.IsNotExist(err) {
		t.Errorf("RevalidateSize of a missing namespace = %v, want IsNotExist", err)
	}
	if err := fs.RevalidateSize(ctx, subsysNQN(t, 2), 1); !configfs.IsNotExist(err) {
		t.Errorf("RevalidateSize of a missing subsystem = %v, want IsNotExist", err)
	}
	e.Namespaces[0].Enabled = false
	mustApply(t, fs, ctx, e)
	if err := fs.RevalidateSize(ctx, e.NQN, 1); !isErrno(err, syscall.EINVAL) {
		t.Errorf("RevalidateSize of a disabled namespace = %v, want EINVAL", err)
	}
}
