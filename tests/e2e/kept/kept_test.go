package kept

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

func alwaysAlive() error { return nil }

// serve runs the keeper's loop on ch until the test ends.
func serve(t *testing.T, ch Channel, extra ...string) chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ch.Serve(ctx, extra, &bytes.Buffer{}, 10*time.Millisecond) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return done
}

// What make e2e-run sees is what the binary printed, and the binary's
// exit status, with the keeper's extra flag after the host's.
func TestRequestOutputAndStatus(t *testing.T) {
	ch := Channel{Dir: t.TempDir()}
	serve(t, ch, "attached")
	for i, tc := range []struct {
		script string
		want   int
	}{
		{`echo "args: $*"; echo to stderr >&2; exit 3`, 3},
		{`echo "args: $*"; sleep 0.2; echo done`, 0},
	} {
		id := "20250101-000000-" + strconv.Itoa(i)
		if err := ch.Submit(Request{ID: id, Binary: "/bin/sh", Dir: t.TempDir(), Args: []string{"-c", tc.script, "sh", "-test.v"}}); err != nil {
			t.Fatal(err)
		}
		var out syncbuf.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := ch.Follow(ctx, id, &out, 10*time.Millisecond, alwaysAlive)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if st.ExitStatus != tc.want {
			t.Errorf("request %d: exit status %d, want %d (%+v)", i, st.ExitStatus, tc.want, st)
		}
		if !strings.Contains(out.String(), "args: -test.v attached\n") {
			t.Errorf("request %d: output %q lacks the binary's arguments with the keeper's flag last", i, out.String())
		}
	}
}

func TestRequestThatCannotStart(t *testing.T) {
	ch := Channel{Dir: t.TempDir()}
	serve(t, ch)
	if err := ch.Submit(Request{ID: "a", Binary: filepath.Join(t.TempDir(), "missing.test")}); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	st, err := ch.Follow(context.Background(), "a", &out, 10*time.Millisecond, alwaysAlive)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitStatus != 125 || st.Error == "" || !strings.Contains(out.String(), "missing.test") {
		t.Errorf("a missing binary: %+v, output %q; want status 125 and the reason in both", st, out.String())
	}
}

// Ctrl-C in make e2e-run stops the binary in the guest, and the keeper
// goes on serving.
func TestCancel(t *testing.T) {
	ch := Channel{Dir: t.TempDir()}
	serve(t, ch)
	if err := ch.Submit(Request{ID: "long", Binary: "/bin/sh", Args: []string{"-c", "echo started; sleep 600"}}); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "started") {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		ch.Follow(ctx, "long", &out, 10*time.Millisecond, alwaysAlive)
		cancel()
		if time.Now().After(deadline) {
			t.Fatal("the binary did not start")
		}
	}
	if err := ch.Cancel("long"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := ch.Follow(ctx, "long", &out, 10*time.Millisecond, alwaysAlive)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitStatus == 0 {
		t.Errorf("a cancelled binary reported success: %+v", st)
	}
	if err := ch.Submit(Request{ID: "next", Binary: "/bin/true"}); err != nil {
		t.Fatal(err)
	}
	if st, err := ch.Follow(ctx, "next", &out, 10*time.Millisecond, alwaysAlive); err != nil || st.ExitStatus != 0 {
		t.Errorf("the request after a cancelled one: %+v, %v", st, err)
	}
}

// make e2e-down ends the keeper's loop without an error; a guest that
// dies under a run ends the host's wait with that error.
func TestDownAndDeadGuest(t *testing.T) {
	ch := Channel{Dir: t.TempDir()}
	done := serve(t, ch)
	if err := os.WriteFile(ch.path(downFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after down: %v", err)
		}
		done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not stop when asked to")
	}
	dead := errors.New("QEMU gone")
	if _, err := ch.Follow(context.Background(), "never", &bytes.Buffer{}, time.Millisecond, func() error { return dead }); !errors.Is(err, dead) {
		t.Errorf("Follow with a dead guest: %v, want %v", err, dead)
	}
	if err := ch.Submit(Request{ID: "../escape"}); err == nil {
		t.Error("Submit took an ID with a path in it")
	}
}

func TestStateRoundTripAndStaleness(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadState(dir); !errors.Is(err, ErrNoState) {
		t.Fatalf("LoadState of nothing: %v, want ErrNoState", err)
	}
	s := State{SupervisorPID: 10, QEMUPID: 4242, RunDir: "/var/cache/pillar-csi/lab/runs/run-1", Root: "/work/x",
		Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Deadline: time.Date(2025, 1, 2, 7, 4, 5, 0, time.UTC), MemoryMB: 3072}
	if err := s.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != s {
		t.Errorf("state round trip:\n got %+v\nwant %+v", got, s)
	}

	proc := t.TempDir()
	cmdline := func(pid int, args ...string) {
		p := filepath.Join(proc, strconv.Itoa(pid))
		os.MkdirAll(p, 0o755)
		if err := os.WriteFile(filepath.Join(p, "cmdline"), []byte(strings.Join(args, "\x00")+"\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.alive(proc); !errors.Is(err, ErrStale) {
		t.Errorf("no such process: %v, want ErrStale", err)
	}
	cmdline(4242, "bash")
	if err := s.alive(proc); !errors.Is(err, ErrStale) {
		t.Errorf("the PID is another process's: %v, want ErrStale", err)
	}
	cmdline(4242, "qemu-system-x86_64", "-append", "console=ttyS0 pillar.run="+s.RunDir+"-2 pillar.modules=/x")
	if err := s.alive(proc); !errors.Is(err, ErrStale) {
		t.Errorf("QEMU of another run: %v, want ErrStale", err)
	}
	for _, tail := range []string{" pillar.modules=/x", ""} {
		cmdline(4242, "qemu-system-x86_64", "-append", "console=ttyS0 pillar.run="+s.RunDir+tail, "-m", "3072")
		if err := s.alive(proc); err != nil {
			t.Errorf("the run's QEMU (param followed by %q): %v", tail, err)
		}
	}

	if err := RemoveState(dir, "/another/run"); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(dir); err != nil {
		t.Errorf("RemoveState removed the state of another run: %v", err)
	}
	if err := RemoveState(dir, s.RunDir); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(dir); !errors.Is(err, ErrNoState) {
		t.Errorf("after RemoveState: %v, want ErrNoState", err)
	}
}

// Only one make e2e-up or e2e-run at a time holds its lock.
func TestLockFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x", "run.lock")
	f, err := lockFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := lockFile(p); err == nil {
		g.Close()
		t.Error("a second lock succeeded while the first is held")
	}
	f.Close()
	g, err := lockFile(p)
	if err != nil {
		t.Errorf("the lock after its release: %v", err)
	} else {
		g.Close()
	}
}
