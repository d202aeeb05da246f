//go:build kernel

package kerneltest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pillar-csi/pillar-csi/configfs"
)

const (
	nvmetDir = configfs.DefaultRoot + "/nvmet"
	// labMarker is on the guest kernel's command line and nowhere else.
	labMarker = "pillar.lab=1"
	// scratchDir is on the guest's tmpfs-backed overlay, not shared with
	// the host.
	scratchDir = "/var/tmp"
)

// requireGuest stops the test unless it runs in the kernel lab's guest. A
// real-kernel test that cannot run where it is asked to must fail, not
// skip, or a CI run that lost its VM would report green.
func requireGuest(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatalf("real-kernel test: run it with make test-kernel (cannot read /proc/cmdline: %v)", err)
	}
	if !slices.Contains(strings.Fields(string(b)), labMarker) {
		t.Fatalf("real-kernel test: run it with make test-kernel (/proc/cmdline lacks %s: this is not the kernel lab's guest)", labMarker)
	}
	if _, err := os.Stat(nvmetDir); err != nil {
		t.Fatalf("nvmet is not loaded in the guest: %v", err)
	}
}

// start is what every test calls first: it checks the guest, insists on an
// empty nvmet tree (a test that leaked objects must not make the next one
// pass or fail) and wipes the tree again when the test ends, whatever
// happened.
func start(t *testing.T) (*configfs.FS, context.Context) {
	t.Helper()
	requireGuest(t)
	if leftover := treeObjects(t); len(leftover) > 0 {
		t.Fatalf("nvmet tree not empty at start: %v", leftover)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nvmet tree at failure:\n%s", dumpTree(nvmetDir))
		}
		wipe(t)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return configfs.NewFS(""), ctx
}

// treeObjects lists the user-made objects under nvmet.
func treeObjects(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, d := range []string{"subsystems", "ports", "hosts"} {
		ents, err := os.ReadDir(filepath.Join(nvmetDir, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			out = append(out, d+"/"+e.Name())
		}
	}
	return out
}

// wipe disconnects every fabrics controller and removes every nvmet object
// with plain syscalls, independently of the code under test.
func wipe(t testing.TB) {
	t.Helper()
	wipeTree()
	if left := treeObjects(t); len(left) > 0 {
		t.Errorf("could not wipe the nvmet tree: %v", left)
	}
}

func wipeTree() {
	ctrls, _ := filepath.Glob("/sys/class/nvme/nvme*/delete_controller")
	for _, c := range ctrls {
		_ = os.WriteFile(c, []byte("1"), 0)
	}
	glob := func(p string) []string { m, _ := filepath.Glob(filepath.Join(nvmetDir, p)); return m }
	for _, l := range append(glob("ports/*/subsystems/*"), glob("subsystems/*/allowed_hosts/*")...) {
		_ = os.Remove(l)
	}
	for _, d := range slices.Concat(glob("ports/*/referrals/*"), glob("ports/*/ana_groups/*"),
		glob("subsystems/*/namespaces/*"), glob("ports/*"), glob("subsystems/*"), glob("hosts/*")) {
		if filepath.Base(d) != "1" || !strings.Contains(d, "/ana_groups/") {
			_ = unix.Rmdir(d)
		}
	}
}

// TestMain starts the suite from an empty nvmet tree: the lab runs every
// module's kernel suite in one guest, and what an earlier suite left
// behind must not fail this one. Outside the lab it changes nothing; the
// tests then fail in requireGuest.
func TestMain(m *testing.M) {
	if b, err := os.ReadFile("/proc/cmdline"); err == nil && slices.Contains(strings.Fields(string(b)), labMarker) {
		if ents, _ := filepath.Glob(nvmetDir + "/*/*"); len(ents) > 0 {
			fmt.Fprintf(os.Stderr, "kerneltest: removing %d nvmet objects left by earlier suites\n", len(ents))
			wipeTree()
		}
	}
	os.Exit(m.Run())
}

// dumpTree renders a configfs tree in the fixture format of
// ../testdata/basic.tree, for failure logs.
func dumpTree(dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(filepath.Dir(dir), p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			fmt.Fprintf(&b, "l %q %q\n", rel, target)
		case fi.IsDir():
			fmt.Fprintf(&b, "d %q\n", rel)
		default:
			v, err := os.ReadFile(p)
			if err != nil {
				v = []byte("<" + err.Error() + ">")
			}
			fmt.Fprintf(&b, "f %q %q\n", rel, v)
		}
		return nil
	})
	return b.String()
}

// run executes a command with a deadline, in its own process group (killed
// whole on timeout), and returns its stdout; stderr goes into the error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// newLoop returns a loop device over a sparse file of the given size.
func newLoop(t testing.TB, mib int64) string {
	t.Helper()
	f, err := os.CreateTemp(scratchDir, "configfs-loop-*")
	if err != nil {
		t.Fatal(err)
	}
	name := f.Name()
	t.Cleanup(func() { os.Remove(name) })
	if err := f.Truncate(mib << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dev := strings.TrimSpace(run(t, "losetup", "--find", "--show", name))
	t.Cleanup(func() {
		// nvmet may hold the device a moment after its namespace goes.
		for i := 0; i < 50; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := exec.CommandContext(ctx, "losetup", "-d", dev).Run()
			cancel()
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("losetup -d %s kept failing", dev)
	})
	return dev
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newUUID() string {
	h := randomHex(16)
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

func hostNQN() string { return "nqn.2014-08.org.nvmexpress:uuid:" + newUUID() }

// subsysNQN names a subsystem after the test so a leak is easy to trace.
func subsysNQN(t testing.TB, n int) string {
	name := strings.NewReplacer("/", ".", "_", "-").Replace(t.Name())
	return fmt.Sprintf("nqn.2024-01.io.pillar-csi.kerneltest:%s.%d", strings.ToLower(name), n)
}

var nextPort atomic.Int32

// freePort returns a TCP port no other test in this process uses.
func freePort() string { return strconv.Itoa(4420 + int(nextPort.Add(1))) }

func loopback(port string) configfs.Address {
	return configfs.Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "127.0.0.1", TrSvcID: port}
}

// simpleExport exports dev as namespace 1 with a fresh UUID, reachable on
// addr by the given hosts (any host when none).
// Every attribute is given, so that the export reads back exactly.
func simpleExport(nqn, dev string, addr configfs.Address, hosts ...string) configfs.Export {
	return configfs.Export{
		NQN: nqn,
		Attrs: configfs.SubsystemAttrs{
			AllowAnyHost: len(hosts) == 0,
			Version:      "1.3", Serial: randomHex(10), Model: "pillar-csi",
			CntlIDMin: 1, CntlIDMax: 65519, QIDMax: 128,
		},
		Namespaces: []configfs.Namespace{{
			NSID: 1, DevicePath: dev, DeviceUUID: newUUID(), ANAGroupID: 1, Enabled: true,
		}},
		Ports:        []configfs.Address{addr},
		AllowedHosts: hosts,
	}
}

// controller is a fabrics controller of the kernel's own NVMe/TCP initiator.
type controller struct {
	name string // nvmeN
}

var fabricsMu sync.Mutex

// connect connects the initiator as hostnqn; it returns the kernel's error
// (EIO when the target refuses the host).
func connect(addr configfs.Address, nqn, hostnqn string) (*controller, error) {
	opts := fmt.Sprintf("transport=tcp,traddr=%s,trsvcid=%s,nqn=%s,hostnqn=%s,reconnect_delay=1,ctrl_loss_tmo=2",
		addr.TrAddr, addr.TrSvcID, nqn, hostnqn)
	fabricsMu.Lock()
	defer fabricsMu.Unlock()
	f, err := os.OpenFile("/dev/nvme-fabrics", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.WriteString(opts); err != nil {
		return nil, err
	}
	buf := make([]byte, 256)
	n, err := f.Read(buf)
	if err != nil {
		return nil, err
	}
	// "instance=N,cntlid=M"
	for _, kv := range strings.Split(strings.TrimSpace(string(buf[:n])), ",") {
		if v, ok := strings.CutPrefix(kv, "instance="); ok {
			return &controller{name: "nvme" + v}, nil
		}
	}
	return nil, fmt.Errorf("unexpected nvme-fabrics answer %q", buf[:n])
}

func mustConnect(t testing.TB, addr configfs.Address, nqn, hostnqn string) *controller {
	t.Helper()
	c, err := connect(addr, nqn, hostnqn)
	if err != nil {
		t.Fatalf("connect %s as %s: %v", nqn, hostnqn, err)
	}
	t.Cleanup(c.disconnect)
	return c
}

func (c *controller) attr(name string) string {
	b, err := os.ReadFile("/sys/class/nvme/" + c.name + "/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (c *controller) disconnect() {
	_ = os.WriteFile("/sys/class/nvme/"+c.name+"/delete_controller", []byte("1"), 0)
}

// blockDevice waits for the namespace with the given UUID to appear as a
// block device and returns its /dev path.
func blockDevice(t testing.TB, uuid string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		paths, _ := filepath.Glob("/sys/block/nvme*/uuid")
		for _, p := range paths {
			// With native multipath the per-path nodes (nvmeXcYnZ)
			// have no /dev entry; the head node nvmeXnZ does.
			if !headNode.MatchString(filepath.Base(filepath.Dir(p))) {
				continue
			}
			if b, _ := os.ReadFile(p); strings.TrimSpace(string(b)) == uuid {
				return "/dev/" + filepath.Base(filepath.Dir(p))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no block device with UUID %s appeared", uuid)
	return ""
}

var headNode = regexp.MustCompile(`^nvme[0-9]+n[0-9]+$`)

// blockIO does O_DIRECT writes and read-backs of 4 KiB blocks.
type blockIO struct {
	fd  int
	buf []byte // page-aligned
	out []byte
}

func openBlockIO(t testing.TB, dev string) *blockIO {
	t.Helper()
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dev, err)
	}
	mem, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	b := &blockIO{fd: fd, buf: mem[:4096], out: mem[4096:]}
	t.Cleanup(func() { unix.Close(fd); unix.Munmap(mem) })
	return b
}

// roundTrip writes a pattern for seq to block n and reads it back.
func (b *blockIO) roundTrip(n, seq int64) error {
	for i := range b.buf {
		b.buf[i] = byte(seq + int64(i))
	}
	if _, err := unix.Pwrite(b.fd, b.buf, n*4096); err != nil {
		return fmt.Errorf("write block %d: %w", n, err)
	}
	if _, err := unix.Pread(b.fd, b.out, n*4096); err != nil {
		return fmt.Errorf("read block %d: %w", n, err)
	}
	if !bytes.Equal(b.buf, b.out) {
		return fmt.Errorf("block %d read back different data", n)
	}
	return nil
}

// ioLoad keeps doing round trips until stopped and counts them.
type ioLoad struct {
	stop chan struct{}
	done chan struct{}
	ops  atomic.Int64
	err  error
}

func startIO(b *blockIO) *ioLoad {
	l := &ioLoad{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for seq := int64(0); ; seq++ {
			select {
			case <-l.stop:
				return
			default:
			}
			if err := b.roundTrip(seq%64, seq); err != nil {
				l.err = err
				return
			}
			l.ops.Add(1)
		}
	}()
	return l
}

func (l *ioLoad) finish() (int64, error) {
	close(l.stop)
	<-l.done
	return l.ops.Load(), l.err
}

func isErrno(err error, errno syscall.Errno) bool { return errors.Is(err, errno) }
