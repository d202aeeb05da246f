//go:build kernel

package backends

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

// TestCancelKillsBlockedLVM holds LVM's volume group lock, so that the
// backend's lvm command blocks waiting for it, and ends the context: the
// command must be killed (no lvm process left behind holding or waiting
// for the lock), the error must say why, and the store must work again
// once the lock is free.
func TestCancelKillsBlockedLVM(t *testing.T) {
	s, vg := lvmStore(t, "lvm-cancel", false)
	b := s.backend(command.Exec{})

	// LVM's file lock for a VG (locking_dir /run/lock/lvm, configure
	// --with-default-locking-dir); lvm waits for it (wait_for_locks=1).
	lock := filepath.Join("/run/lock/lvm", "V_"+vg.Name)
	f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = b.Create(ctx, "pvc-blocked", extent)
	var ce *command.Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ce) || ce.ExitCode != -1 {
		t.Fatalf("Create with the lock held = %v; want a killed command and context.DeadlineExceeded", err)
	}
	waitNoProcess(t, vg.Name)

	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctxT(t), "pvc-blocked", extent); err != nil {
		t.Fatalf("Create after the lock was released: %v", err)
	}
	if err := b.Delete(ctxT(t), "pvc-blocked"); err != nil {
		t.Fatal(err)
	}
}

// TestCancelKillsProcessGroup checks the runner itself on the lab's
// kernel: a tool that forks a helper and waits for it is killed with the
// helper.
func TestCancelKillsProcessGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	out, err := command.Exec{}.Run(ctx, "sh", "-c", "sleep 600 & echo $!; wait")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want context.DeadlineExceeded", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("no helper PID in %q", out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("helper %d survived the cancellation", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// waitNoProcess waits until no live process has word in its command line.
func waitNoProcess(t *testing.T, word string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := processesWith(word)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still mention %s after the cancellation", pids, word)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func processesWith(word string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), word) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
