//go:build kernel

package smoke

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Plain configfs and sysfs writes, deliberately without a library: the
// smoke suite is the reference the configfs module is checked against.

const nvmetRoot = "/sys/kernel/config/nvmet"

func write(t testing.TB, path, value string) {
	t.Helper()
	// configfs attributes take one write(2) of the whole value.
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		t.Fatalf("write %q to %s: %v", value, path, err)
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// uuidString formats 16 random bytes as a version-4 UUID.
func uuidString(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// freeTCPPort asks the kernel for an unused loopback port. Another process
// could take it before nvmet binds it, but in the guest nothing else
// listens; the point is never to collide with another test's export.
func freeTCPPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
		NQN:   "nqn.2024-01.io.pillar-csi:smoke-" + name + "-" + randomHex(t, 4),
		UUID:  uuidString(t),
		NGUID: uuidString(t),
		Port:  freeTCPPort(t),
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

// controller is a connected NVMe over Fabrics controller.
type controller struct {
	Name string // nvmeN
}

// connect connects the kernel initiator to the export and returns the
// controller; disconnect (also registered with t.Cleanup) removes it.
func connect(t testing.TB, e *export) *controller {
	t.Helper()
	f, err := os.OpenFile("/dev/nvme-fabrics", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/nvme-fabrics (is nvme-tcp loaded?): %v", err)
	}
	defer f.Close()
	opts := fmt.Sprintf("transport=tcp,traddr=127.0.0.1,trsvcid=%d,nqn=%s", e.Port, e.NQN)
	if _, err := f.Write([]byte(opts)); err != nil {
		t.Fatalf("connect %s: %v", opts, err)
	}
	buf := make([]byte, 256)
	n, err := f.Read(buf)
	if err != nil {
		t.Fatalf("read connect result: %v", err)
	}
	var inst, cntlid int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(buf[:n])), "instance=%d,cntlid=%d", &inst, &cntlid); err != nil {
		t.Fatalf("parse connect result %q: %v", buf[:n], err)
	}
	c := &controller{Name: "nvme" + strconv.Itoa(inst)}
	t.Cleanup(func() { c.disconnect(t) })
	return c
}

func (c *controller) disconnect(t testing.TB) {
	t.Helper()
	if c.Name == "" {
		return
	}
	p := filepath.Join("/sys/class/nvme", c.Name, "delete_controller")
	if err := os.WriteFile(p, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("disconnect %s: %v", c.Name, err)
	}
	c.Name = ""
}

// nsHead matches the block devices users open. With native multipath the
// per-path devices (nvme0c0n1) are in /sys/block too, with the same uuid,
// but they are hidden: they have no /dev node.
var nsHead = regexp.MustCompile(`^nvme[0-9]+n[0-9]+$`)

// namespaceByUUID waits for the block device whose namespace UUID is uuid
// and returns its /dev path. The initiator scans namespaces
// asynchronously after connecting, and device names follow subsystem
// instance order, so the UUID is the only reliable handle.
func namespaceByUUID(t testing.TB, uuid string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		devs, _ := filepath.Glob("/sys/block/nvme*n*")
		for _, d := range devs {
			if !nsHead.MatchString(filepath.Base(d)) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, "uuid"))
			if err == nil && strings.EqualFold(strings.TrimSpace(string(b)), uuid) {
				return "/dev/" + filepath.Base(d)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no NVMe namespace with UUID %s appeared (have %v)", uuid, devs)
		}
		time.Sleep(100 * time.Millisecond)
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

// flushBuffers drops the page cache of a block device (BLKFLSBUF).
func flushBuffers(t testing.TB, dev string) {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const blkflsbuf = 0x1261
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), blkflsbuf, 0); errno != 0 {
		t.Fatalf("BLKFLSBUF %s: %v", dev, errno)
	}
}
