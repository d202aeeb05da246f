//go:build kernel

package smoke

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// The target side is plain configfs writes, deliberately without the
// configfs module: the smoke suite is the reference that module is checked
// against. The initiator side is the lab fixture's (fixture.Connect,
// fixture.NamespaceByUUID), which is itself plain writes to
// /dev/nvme-fabrics and sysfs.

const nvmetRoot = "/sys/kernel/config/nvmet"

func write(t testing.TB, path, value string) {
	t.Helper()
	// configfs attributes take one write(2) of the whole value.
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		t.Fatalf("write %q to %s: %v", value, path, err)
	}
}

// export is one subsystem with one namespace, listening on one port.
type export struct {
	NQN    string
	UUID   string
	NGUID  string
	Port   int    // TCP port
	portID string // configfs port directory
	subDir string
	nsDir  string
	link   string
}

// exportDevice exports dev over NVMe/TCP on 127.0.0.1 and returns the
// export; unexport (also registered with t.Cleanup) removes it.
func exportDevice(t testing.TB, dev, name string) *export {
	t.Helper()
	e := &export{
		NQN:   "nqn.2024-01.io.pillar-csi:smoke-" + name + "-" + fixture.RandomHex(t, 4),
		UUID:  fixture.RandomUUID(t),
		NGUID: fixture.RandomUUID(t),
		Port:  fixture.FreeTCPPort(t),
	}
	e.subDir = filepath.Join(nvmetRoot, "subsystems", e.NQN)
	if err := os.Mkdir(e.subDir, 0o755); err != nil {
		t.Fatalf("create subsystem: %v", err)
	}
	t.Cleanup(func() { e.unexport(t) })
	write(t, filepath.Join(e.subDir, "attr_allow_any_host"), "1")
	e.nsDir = filepath.Join(e.subDir, "namespaces", "1")
	if err := os.Mkdir(e.nsDir, 0o755); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	write(t, filepath.Join(e.nsDir, "device_path"), dev)
	write(t, filepath.Join(e.nsDir, "device_uuid"), e.UUID)
	write(t, filepath.Join(e.nsDir, "device_nguid"), e.NGUID)
	write(t, filepath.Join(e.nsDir, "enable"), "1")

	// Port IDs are 16-bit numbers; pick a free one.
	for id := 1 + int(time.Now().UnixNano()%30000); ; id++ {
		dir := filepath.Join(nvmetRoot, "ports", strconv.Itoa(id))
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			e.portID = dir
			break
		}
		if !errors.Is(err, os.ErrExist) {
			t.Fatalf("create port: %v", err)
		}
	}
	write(t, filepath.Join(e.portID, "addr_trtype"), "tcp")
	write(t, filepath.Join(e.portID, "addr_adrfam"), "ipv4")
	write(t, filepath.Join(e.portID, "addr_traddr"), "127.0.0.1")
	write(t, filepath.Join(e.portID, "addr_trsvcid"), strconv.Itoa(e.Port))
	e.link = filepath.Join(e.portID, "subsystems", e.NQN)
	if err := os.Symlink(e.subDir, e.link); err != nil {
		t.Fatalf("link subsystem to port: %v", err)
	}
	return e
}

// unexport tears the export down in the order nvmet requires; it is
// idempotent and reports every step that fails.
func (e *export) unexport(t testing.TB) {
	t.Helper()
	var errs []error
	rm := func(p string) {
		if p == "" {
			return
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	rm(e.link)
	rm(e.portID)
	if e.nsDir != "" {
		if _, err := os.Stat(e.nsDir); err == nil {
			if err := os.WriteFile(filepath.Join(e.nsDir, "enable"), []byte("0"), 0); err != nil {
				errs = append(errs, err)
			}
		}
	}
	rm(e.nsDir)
	rm(e.subDir)
	e.link, e.portID, e.nsDir, e.subDir = "", "", "", ""
	if err := errors.Join(errs...); err != nil {
		t.Errorf("unexport %s: %v", e.NQN, err)
	}
}

// waitGone waits until the block device disappears after a disconnect.
func waitGone(t testing.TB, dev string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join("/sys/block", filepath.Base(dev))); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still present 30s after disconnect", dev)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
