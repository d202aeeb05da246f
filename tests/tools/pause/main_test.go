package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func buildPause(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startPause starts pause as PID 1 of a new PID namespace, as in a pod
// sandbox, so that orphans of that namespace are its children.
func startPause(t *testing.T, bin string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test makes a PID namespace, which needs root")
	}
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	// A signal that arrives before pause installed its handlers ends it
	// with Go's default status 2: wait for its word that they are in place.
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stderr).ReadString('\n')
		ready <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case line := <-ready:
		if line != readyLine {
			t.Fatalf("pause's first line on stderr: %q, want %q", line, readyLine)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("pause did not say it was ready within 30s")
	}
	return cmd
}

func exitsZeroOn(t *testing.T, bin string, sig syscall.Signal) {
	cmd := startPause(t, bin)
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause after %v: %v, want exit status 0", sig, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("pause still running 10s after %v", sig)
	}
}

func TestExitsZeroOnSIGTERM(t *testing.T) { exitsZeroOn(t, buildPause(t), syscall.SIGTERM) }
func TestExitsZeroOnSIGINT(t *testing.T)  { exitsZeroOn(t, buildPause(t), syscall.SIGINT) }

// children lists the PIDs whose parent is pid, with their state.
func children(t *testing.T, pid int) map[int]string {
	t.Helper()
	out := map[int]string{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var state string
		var ppid int
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "State:"); ok {
				state = strings.Fields(v)[0]
			}
			if v, ok := strings.CutPrefix(s.Text(), "PPid:"); ok {
				ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		f.Close()
		if ppid == pid {
			out[child] = state
		}
	}
	return out
}

// An orphan of the sandbox's namespace becomes pause's child; when it exits
// it must not stay a zombie.
func TestReapsOrphans(t *testing.T) {
	cmd := startPause(t, buildPause(t))
	pid := cmd.Process.Pid
	// nsenter's shell runs in pause's namespace, starts a sleep in the
	// background and exits at once: the sleep is orphaned to pause.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(pid), "-p", "--",
		"sh", "-c", "sleep 1 >/dev/null 2>&1 &").CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(children(t, pid)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the orphan never became pause's child; the test proves nothing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		kids := children(t, pid)
		if len(kids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("children of pause 10s after they exited: %v (Z is an unreaped zombie)", fmt.Sprint(kids))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
