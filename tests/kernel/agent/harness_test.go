//go:build kernel

package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/pillar-csi/pillar-csi/agent/server"
	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	mib = int64(1) << 20
	// opTimeout bounds each call; TCG makes a zfs command take a second.
	opTimeout = 3 * time.Minute
	// childEnv carries the socket path to a re-executed test binary that
	// is to serve the agent instead of running tests; childGenEnv its
	// fencing directory.
	childEnv    = "PILLAR_AGENT_TEST_SOCKET"
	childGenEnv = "PILLAR_AGENT_TEST_GENERATIONS"
)

// TestMain serves the agent when the binary was re-executed as a child
// agent process (see startChild), and runs the tests otherwise.
func TestMain(m *testing.M) {
	if sock := os.Getenv(childEnv); sock != "" {
		if err := serveChild(sock, os.Getenv(childGenEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "child agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveChild is the body of a child agent process: server.New on the
// given fencing directory, served on a unix socket until killed.
func serveChild(sock, gen string) error {
	srv, err := server.New(server.Config{NodeName: "lab", Version: "test", GenerationsDir: gen,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer srv.Close()
	os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	srv.Register(g)
	return g.Serve(lis)
}

// socketPath is a unix socket path in a fresh directory, short enough for
// sun_path (108 bytes) whatever the test's name.
func socketPath(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, name)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func dial(t testing.TB, sock string) agentv1.AgentServiceClient {
	t.Helper()
	// A dialer instead of a unix:// target: a socket path is not a URL
	// (a subtest's directory may hold '#').
	conn, err := grpc.NewClient("passthrough:///pillar-agent", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentv1.NewAgentServiceClient(conn)
}

// inProcess is an agent served from the test process on a unix socket.
type inProcess struct {
	srv *server.Server
	g   *grpc.Server
	c   agentv1.AgentServiceClient
}

// startAgent serves a fresh server.Server on the fencing directory gen.
func startAgent(t testing.TB, gen string) *inProcess {
	t.Helper()
	return startAgentConfig(t, server.Config{GenerationsDir: gen})
}

// startAgentConfig serves a fresh server.Server configured by cfg, its
// node name, version and logger filled in.
func startAgentConfig(t testing.TB, cfg server.Config) *inProcess {
	t.Helper()
	cfg.NodeName, cfg.Version = "lab", "test"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Ready(context.Background()); err != nil {
		t.Fatalf("agent not ready in the lab: %v", err)
	}
	sock := socketPath(t, "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go g.Serve(lis)
	a := &inProcess{srv: srv, g: g, c: dial(t, sock)}
	t.Cleanup(a.stop)
	return a
}

// stop ends the agent like a restart does: the server stops and the
// fencing directory's lock is released. Safe to call twice.
func (a *inProcess) stop() {
	if a.g == nil {
		return
	}
	a.g.Stop()
	a.srv.Close()
	a.g = nil
}

// child is an agent running as a separate process.
type child struct {
	cmd    *exec.Cmd
	c      agentv1.AgentServiceClient
	stderr *bytes.Buffer
	done   chan error
}

// startChild re-executes the test binary as an agent process on the
// fencing directory gen and waits until it answers.
func startChild(t testing.TB, gen string) *child {
	t.Helper()
	sock := socketPath(t, "child.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+sock, childGenEnv+"="+gen)
	ch := &child{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = ch.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ch.done <- cmd.Wait() }()
	t.Cleanup(func() {
		ch.kill(t)
		if t.Failed() && ch.stderr.Len() > 0 {
			t.Logf("child agent stderr:\n%s", ch.stderr)
		}
	})
	ch.c = dial(t, sock)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := ch.c.GetAgentInfo(ctx, &agentv1.GetAgentInfoRequest{})
		cancel()
		if err == nil {
			return ch
		}
		select {
		case werr := <-ch.done:
			ch.done <- werr
			t.Fatalf("child agent exited: %v\n%s", werr, ch.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("child agent does not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs the child and waits for it. Safe to call twice.
func (ch *child) kill(t testing.TB) {
	if ch.cmd.Process == nil {
		return
	}
	ch.cmd.Process.Signal(syscall.SIGKILL)
	err := <-ch.done
	ch.done <- err
}

// stop sends SIGSTOP and waits until every thread of the child is
// stopped: kill(2) returns before the threads reach a point where they
// stop, and until then the child keeps writing.
func (ch *child) stop(t testing.TB) {
	t.Helper()
	pid := ch.cmd.Process.Pid
	ch.cmd.Process.Signal(syscall.SIGSTOP)
	deadline := time.Now().Add(time.Minute)
	for {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("child %d has no tasks: %v", pid, err)
		}
		running := 0
		for _, p := range tasks {
			b, err := os.ReadFile(p)
			if err != nil {
				continue // the thread exited
			}
			// The state follows the parenthesized command name.
			if i := bytes.LastIndexByte(b, ')'); i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				running++
			}
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d: %d threads did not stop", pid, running)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// rssKiB is the child's resident set (VmRSS in /proc/PID/status).
func (ch *child) rssKiB(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", ch.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", ch.cmd.Process.Pid)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

func tok(uid string, gen uint64) *agentv1.FencingToken {
	return &agentv1.FencingToken{LifecycleUid: uid, PublicationGeneration: gen}
}

func zfsStore(pool string) *agentv1.Store {
	return &agentv1.Store{Name: "zfs", Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: pool, ParentDataset: "pillar", Sparse: true}}}
}

func lvmStore(vg, thinPool string) *agentv1.Store {
	return &agentv1.Store{Name: "lvm", Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{VolumeGroup: vg, ThinPool: thinPool}}}
}

func tcp(port int, acl bool) *agentv1.NvmeofTcpExport {
	return &agentv1.NvmeofTcpExport{BindAddress: "127.0.0.1", Port: uint32(port), AclEnabled: acl}
}

// readNvmet is configfs as the configfs module reads it.
func readNvmet(t testing.TB) *configfs.State {
	t.Helper()
	st, err := configfs.NewFS("").Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// requireEmptyNvmet fails unless no other test left exports behind:
// Reconcile removes dead pillar-owned exports, so tests must not overlap.
func requireEmptyNvmet(t testing.TB) {
	t.Helper()
	if st := readNvmet(t); len(st.Subsystems) != 0 || len(st.Ports) != 0 {
		t.Fatalf("nvmet is not empty at the start: %+v", st)
	}
	t.Cleanup(func() { wipeNvmet(t) })
}

// wipeNvmet removes every nvmet object with plain syscalls, in the order
// nvmet requires, as the loss of configfs at a reboot does: port links,
// ports, access-list links, namespaces, subsystems, hosts. It does not use
// the configfs module, so it also proves Reconcile against a tree the
// agent did not tear down itself.
func wipeNvmet(t testing.TB) {
	t.Helper()
	const root = "/sys/kernel/config/nvmet"
	glob := func(p string) []string {
		m, err := filepath.Glob(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rm := func(p string, f func(string) error) {
		if err := f(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("wipe: %v", err)
		}
	}
	for _, l := range glob("ports/*/subsystems/*") {
		rm(l, os.Remove)
	}
	for _, p := range glob("ports/*") {
		rm(p, syscall.Rmdir)
	}
	for _, l := range glob("subsystems/*/allowed_hosts/*") {
		rm(l, os.Remove)
	}
	for _, ns := range glob("subsystems/*/namespaces/*") {
		rm(ns, syscall.Rmdir)
	}
	for _, s := range glob("subsystems/*") {
		rm(s, syscall.Rmdir)
	}
	for _, h := range glob("hosts/*") {
		rm(h, syscall.Rmdir)
	}
}

// waitSize waits until the block device dev has size bytes.
func waitSize(t testing.TB, dev string, size int64) {
	t.Helper()
	fixture.WaitFor(t, fmt.Sprintf("%s to have %d bytes", dev, size), time.Minute, func() bool {
		n, err := fixture.DeviceSize(dev)
		return err == nil && n == size
	})
}

// written is one write of a directWriter.
type written struct {
	off  int64
	data []byte
}

// directWriter writes blk-sized blocks, each unlike the ones before it, in turn over 16 blocks from
// base of a block device opened with O_DIRECT, each followed by fsync,
// until stopped or an error.
type directWriter struct {
	mu      sync.Mutex
	n       int
	err     error
	lastOK  time.Time
	longest time.Duration
	lastW   written
	done    chan struct{}
	quit    chan struct{}
}

func startDirectWriter(t *testing.T, dev string, base int64, blk int) *directWriter {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := &directWriter{done: make(chan struct{}), quit: make(chan struct{}), lastOK: time.Now()}
	buf := alignedBuffer(blk)
	go func() {
		defer close(w.done)
		defer f.Close()
		for i := 0; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			data := bytes.Repeat([]byte{byte(i)}, blk)
			binary.LittleEndian.PutUint64(data, uint64(i))
			copy(buf, data)
			off := base + int64(i%16*blk)
			_, err := f.WriteAt(buf, off)
			if err == nil {
				err = f.Sync()
			}
			w.mu.Lock()
			if err != nil {
				w.err = fmt.Errorf("write %d at %d: %w", i, off, err)
				w.mu.Unlock()
				return
			}
			now := time.Now()
			w.longest = max(w.longest, now.Sub(w.lastOK))
			w.lastOK, w.n = now, w.n+1
			w.lastW = written{off, data}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.halt() })
	return w
}

func (w *directWriter) count() int { w.mu.Lock(); defer w.mu.Unlock(); return w.n }

func (w *directWriter) waitWrites(t *testing.T, n int) {
	t.Helper()
	fixture.WaitFor(t, fmt.Sprintf("%d writes through the head", n), 2*time.Minute, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			t.Fatalf("the writer: %v", w.err)
		}
		return w.n >= n
	})
}

func (w *directWriter) halt() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.done
}

// stop ends the writer and fails the test if it saw an error; it returns
// the longest pause between two successful writes and their count.
func (w *directWriter) stop(t *testing.T) (time.Duration, int) {
	t.Helper()
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Errorf("the writer saw an error: %v", w.err)
	}
	return w.longest, w.n
}

func (w *directWriter) last() written {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastW
}

// alignedBuffer returns n bytes aligned to 4096, as O_DIRECT needs.
func alignedBuffer(n int) []byte {
	const align = 4096
	b := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(&b[0]))%align)) % align
	return b[skip : skip+n]
}
