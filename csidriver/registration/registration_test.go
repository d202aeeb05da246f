package registration_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/pillar-csi/pillar-csi/csidriver/registration"

	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

const hostEndpoint = "/var/lib/kubelet/plugins/pillar-csi.io/csi.sock"

// running is a Registrar under test.
type running struct {
	*registration.Registrar
	log  *syncbuf.Buffer
	stop func() error // cancels Run and returns its result
}

func start(t *testing.T, dir string, interval time.Duration) *running {
	t.Helper()
	log := &syncbuf.Buffer{}
	r, err := registration.New(registration.Config{Dir: dir, Endpoint: hostEndpoint, CheckInterval: interval,
		Logger: slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(10 * time.Second):
				result = errors.New("Run did not return within 10s of cancel")
			}
		})
		return result
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("registrar log:\n%s", log.String())
		}
	})
	return &running{Registrar: r, log: log, stop: stop}
}

// waitFor polls cond until it is nil, for up to 10 s.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pin returns p's inode number and keeps the inode alive for the rest of
// the test (a hard link elsewhere), so that a new socket cannot get the
// same number from the filesystem.
func pin(t *testing.T, p string) uint64 {
	t.Helper()
	if err := os.Link(p, filepath.Join(t.TempDir(), "pin")); err != nil {
		t.Fatal(err)
	}
	return inode(t, p)
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestNewRejectsBadConfig(t *testing.T) {
	long := "/" + strings.Repeat("x", 120)
	for _, tc := range []struct {
		c    registration.Config
		want string
	}{
		{registration.Config{Endpoint: hostEndpoint}, "directory is empty"},
		{registration.Config{Dir: "/d"}, "-kubelet-registration-path"},
		{registration.Config{Dir: "/d", Endpoint: "unix:///var/lib/kubelet/plugins/pillar-csi.io/csi.sock"}, "without a scheme"},
		{registration.Config{Dir: "/d", Endpoint: "unix:/csi.sock"}, "without a scheme"},
		{registration.Config{Dir: "/d", Endpoint: "csi/csi.sock"}, "absolute path"},
		{registration.Config{Dir: "/d", Endpoint: long}, "limit of a unix socket path"},
		{registration.Config{Dir: long, Endpoint: hostEndpoint}, "limit of a unix socket path"},
		{registration.Config{Dir: "/d", Endpoint: hostEndpoint, CheckInterval: -time.Second}, "must be positive"},
	} {
		if _, err := registration.New(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error mentioning %q", tc.c, err, tc.want)
		}
	}
}

// A running kubelet sees the socket appear, asks for the plugin info and
// registers the plugin; the Registrar reports that.
func TestKubeletRegistersThePlugin(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	r := start(t, dir, time.Hour)
	sock := filepath.Join(dir, "pillar-csi.io-reg.sock")
	if r.Path() != sock {
		t.Fatalf("Path() = %s, want %s", r.Path(), sock)
	}
	k.waitEvent(sock, fsnotify.Create)
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	if r.Serving() != nil {
		t.Errorf("Serving() = %v after the socket appeared", r.Serving())
	}
	if err := r.Registered(); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("Registered() before kubelet answered = %v", err)
	}
	info := getInfo(t, sock)
	if info.Name != "pillar-csi.io" || info.Endpoint != hostEndpoint || len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Errorf("GetInfo = %+v", info)
	}
	notify(t, sock, true, "")
	if err := r.Registered(); err != nil {
		t.Errorf("Registered() after kubelet registered the plugin = %v", err)
	}
	// Only the socket is in the directory: nothing else for kubelet to
	// trip over.
	if socks := scan(t, dir); len(socks) != 1 || socks[0] != sock {
		t.Errorf("kubelet would find %v", socks)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the socket alone", len(entries))
	}
}

// kubelet refuses: the error is logged at error level, the socket keeps
// serving, and kubelet's retry registers the plugin.
func TestKubeletRefusalKeepsServing(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, time.Hour)
	sock := r.Path()
	waitFor(t, "socket", func() error { _, err := os.Lstat(sock); return err })
	getInfo(t, sock)
	notify(t, sock, false, "RegisterPlugin error -- NodeGetInfo: connection refused")
	if err := r.Registered(); err == nil || !strings.Contains(err.Error(), "NodeGetInfo: connection refused") {
		t.Errorf("Registered() after a refusal = %v, want kubelet's reason", err)
	}
	if !strings.Contains(r.log.String(), `"level":"ERROR","msg":"kubelet did not register the plugin`) ||
		!strings.Contains(r.log.String(), "NodeGetInfo: connection refused") {
		t.Errorf("the refusal is not logged at error level with kubelet's reason:\n%s", r.log.String())
	}
	getInfo(t, sock)
	notify(t, sock, true, "")
	if err := r.Registered(); err != nil {
		t.Errorf("Registered() after kubelet's retry = %v", err)
	}
}

// The socket file is removed (a wiped directory, a cleanup script): the
// Registrar notices at its next check and creates a new socket, which a
// running kubelet sees created and registers.
func TestRemovedSocketIsRecreated(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	r := start(t, dir, 20*time.Millisecond)
	sock := r.Path()
	k.waitEvent(sock, fsnotify.Create)
	getInfo(t, sock)
	notify(t, sock, true, "")
	old := pin(t, sock)

	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	k.waitEvent(sock, fsnotify.Remove)
	k.waitEvent(sock, fsnotify.Create)
	if inode(t, sock) == old {
		t.Fatal("same inode after re-creation")
	}
	if err := r.Registered(); err == nil {
		t.Error("Registered() = nil for a new socket kubelet has not answered on")
	}
	getInfo(t, sock)
	notify(t, sock, true, "")
	if err := r.Registered(); err != nil {
		t.Errorf("Registered() = %v after kubelet registered the new socket", err)
	}
	if !strings.Contains(r.log.String(), "registration socket lost") {
		t.Errorf("the loss is not logged:\n%s", r.log.String())
	}
}

// kubelet's directory is removed with the socket (a tmpfs recreated): the
// Registrar re-creates both, and kubelet's scan at its restart finds the
// socket.
func TestWipedDirectoryIsRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plugins_registry")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := start(t, dir, 20*time.Millisecond)
	sock := r.Path()
	waitFor(t, "socket", func() error { _, err := os.Lstat(sock); return err })
	old := pin(t, sock)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "re-created socket", func() error {
		fi, err := os.Lstat(sock)
		if err != nil {
			return err
		}
		if fi.Sys().(*syscall.Stat_t).Ino == old {
			return errors.New("old inode")
		}
		return nil
	})
	// kubelet restarts: it walks the directory and registers what it finds.
	if socks := scan(t, dir); len(socks) != 1 || socks[0] != sock {
		t.Fatalf("kubelet's scan finds %v, want [%s]", socks, sock)
	}
	getInfo(t, sock)
	notify(t, sock, true, "")
	if err := r.Registered(); err != nil {
		t.Errorf("Registered() = %v", err)
	}
}

// A crashed pillar-node left its socket: the next one replaces it. A file
// that is not a socket, or a socket another process serves on, is left
// alone and Run fails with an error that says so.
func TestStartReplacesOnlyAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "pillar-csi.io-reg.sock")

	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // crashed: the file stays, nothing accepts
	stale := pin(t, sock)

	k := startKubelet(t, dir)
	r := start(t, dir, time.Hour)
	k.waitEvent(sock, fsnotify.Create)
	if inode(t, sock) == stale {
		t.Fatal("the stale socket is still in place")
	}
	getInfo(t, sock)
	notify(t, sock, true, "")
	if err := r.Registered(); err != nil {
		t.Errorf("Registered() = %v", err)
	}

	// A second instance while the first serves: refused.
	if err := runOnce(dir); err == nil || !strings.Contains(err.Error(), "another process is serving") {
		t.Errorf("second Run = %v, want 'another process is serving'", err)
	}
	getInfo(t, sock) // the first still serves

	// Not a socket: refused and untouched.
	dir2 := t.TempDir()
	file := filepath.Join(dir2, "pillar-csi.io-reg.sock")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runOnce(dir2); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Run over a regular file = %v, want 'not a socket'", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("the regular file was changed: %q, %v", b, err)
	}

	// No directory: a clear error.
	if err := runOnce(filepath.Join(dir2, "missing")); err == nil || !strings.Contains(err.Error(), "plugins_registry mounted") {
		t.Errorf("Run without the directory = %v", err)
	}
}

// runOnce runs a Registrar on dir that must fail at start.
func runOnce(dir string) error {
	r, err := registration.New(registration.Config{Dir: dir, Endpoint: hostEndpoint,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Run(ctx); err != nil {
		return err
	}
	return fmt.Errorf("Run returned nil at its deadline instead of failing at start")
}

// Shutdown removes the socket, so kubelet deregisters the plugin; the
// next pillar-node creates a new one, which kubelet sees and registers.
func TestShutdownRemovesTheSocketAndRestartRegisters(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	r := start(t, dir, time.Hour)
	sock := r.Path()
	k.waitEvent(sock, fsnotify.Create)
	getInfo(t, sock)
	notify(t, sock, true, "")

	if err := r.stop(); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	k.waitEvent(sock, fsnotify.Remove)
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after shutdown: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in the directory: %v", entries)
	}
	if r.Registered() == nil || r.Serving() == nil {
		t.Error("a stopped Registrar reports registered or serving")
	}

	r2 := start(t, dir, time.Hour)
	k.waitEvent(sock, fsnotify.Create)
	getInfo(t, sock)
	notify(t, sock, true, "")
	if err := r2.Registered(); err != nil {
		t.Errorf("Registered() after the restart = %v", err)
	}
}

// Another process put its own live socket at the path: it is not taken
// over, nor removed at shutdown; once it is gone, the Registrar takes the
// path back.
func TestSuccessorsSocketIsLeftAlone(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, 20*time.Millisecond)
	sock := r.Path()
	waitFor(t, "socket", func() error { _, err := os.Lstat(sock); return err })

	// The other process binds elsewhere and renames over ours.
	other := filepath.Join(dir, ".other")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: other, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := os.Rename(other, sock); err != nil {
		t.Fatal(err)
	}
	theirs := inode(t, sock)
	waitFor(t, "Serving() reports the foreign socket", func() error {
		if err := r.Serving(); err == nil || !strings.Contains(err.Error(), "another process is serving") {
			return fmt.Errorf("Serving() = %v", err)
		}
		return nil
	})
	if inode(t, sock) != theirs {
		t.Fatal("the other process's socket was replaced")
	}
	// It stops and removes its socket: the path is ours again.
	l.Close()
	os.Remove(sock)
	waitFor(t, "socket taken back", func() error {
		if err := r.Serving(); err != nil {
			return err
		}
		_, err := os.Lstat(sock)
		return err
	})
	getInfo(t, sock)

}

// A successor that replaced the socket just before this instance's
// shutdown keeps its socket: shutdown removes only its own.
func TestShutdownLeavesASuccessorsSocket(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, time.Hour)
	sock := r.Path()
	waitFor(t, "socket", func() error { _, err := os.Lstat(sock); return err })
	next := filepath.Join(dir, ".next")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: next, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	defer l.Close()
	if err := os.Rename(next, sock); err != nil {
		t.Fatal(err)
	}
	theirs := inode(t, sock)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); err != nil || inode(t, sock) != theirs {
		t.Errorf("the successor's socket after our shutdown: %v", err)
	}
}
