//go:build kernel

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
	"google.golang.org/grpc/status"
)

// TestKillDuringLVCreate SIGKILLs an agent process while its lvcreate is
// in flight. The lvcreate must die with the agent instead of living on
// with the volume group in hand, and a new agent's retried CreateVolume
// must succeed and leave exactly one logical volume.
//
// The lvcreate is kept in flight by LVM's own lock: the test holds a
// shared flock on the volume group's lock file, as a concurrent reader
// (an operator's lvs) does. The agent's reads before lvcreate (vgs, lvs)
// share it; lvcreate needs it exclusively and waits, which /proc/locks
// shows, until the test lets go.
func TestKillDuringLVCreate(t *testing.T) {
	guest.RequireGuest(t)
	dir := lvmLockingDir(t)
	t.Logf("LVM's locking_dir: %s", dir)
	for _, c := range []struct {
		name string
		thin bool
	}{{"lvm-linear", false}, {"lvm-thin", true}} {
		t.Run(c.name, func(t *testing.T) {
			s := newLVM(t, c.thin)
			vg := s.store.GetLvm().GetVolumeGroup()
			id := "pvc-pdeath-" + s.name
			tk := tok(fixture.RandomUUID(t), 1)
			gen := t.TempDir()
			unlock := lockVG(t, filepath.Join(dir, "V_"+vg))
			defer unlock()

			ch := startChild(t, gen)
			created := make(chan error, 1)
			go func() {
				_, err := ch.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store, CapacityBytes: 64 * mib})
				created <- err
			}()
			var pid int
			fixture.WaitFor(t, "the agent's lvcreate to wait for the volume group's lock", 2*time.Minute, func() bool {
				select {
				case err := <-created:
					t.Fatalf("CreateVolume returned while the volume group was locked: %v", err)
				default:
				}
				pid = childCommand(ch.cmd.Process.Pid, "lvm", "lvcreate")
				return pid != 0 && flockWaiter(t, pid)
			})
			t.Logf("lvm lvcreate %d waits for the lock of %s", pid, vg)

			ch.kill(t)
			killed := time.Now()
			if err := waitGone(pid, 10*time.Second); err != nil {
				t.Errorf("10 s after the agent was SIGKILLed: %v", err)
				// What the survivor does once the lock is free: it goes
				// on and changes the volume group with no agent left.
				unlock()
				if err := waitGone(pid, time.Minute); err != nil {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Errorf("after the lock was released: %v", err)
				}
				out, _ := fixture.LVM(context.Background(), "lvs", "--noheadings", "-o", "lv_name", vg)
				t.Logf("after the orphaned lvcreate, lvs %s: %s", vg, strings.Join(strings.Fields(out), " "))
			} else {
				t.Logf("lvcreate was gone %v after the agent's SIGKILL", time.Since(killed).Round(time.Millisecond))
			}
			t.Logf("the killed agent's CreateVolume: %v", status.Code(<-created))
			unlock()

			// The group is usable, and the retried create converges.
			ch2 := startChild(t, gen)
			r, err := ch2.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store, CapacityBytes: 64 * mib})
			if err != nil {
				t.Fatalf("CreateVolume through a new agent: %v", err)
			}
			if got := r.GetVolume().GetCapacityBytes(); got != 64*mib {
				t.Errorf("created %d bytes, want %d", got, 64*mib)
			}
			vols, err := s.backend.List(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(vols) != 1 || vols[0].ID != id {
				t.Errorf("the store holds %+v, want exactly volume %s", vols, id)
			}
			out, err := fixture.LVM(ctxT(t), "lvs", "--noheadings", "-o", "lv_name", "--select", "lv_name!=thinpool", vg)
			if err != nil {
				t.Fatal(err)
			}
			if lvs := strings.Fields(out); len(lvs) != 1 {
				t.Errorf("volume group %s holds the logical volumes %q besides its thin pool, want exactly one", vg, lvs)
			}
			if _, err := ch2.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: id, Store: s.store}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// lvmLockingDir is where LVM keeps its lock files on this node, as lvm
// itself reports it (with the fixtures' configuration, which the agent's
// matches in everything but udev and backups).
func lvmLockingDir(t *testing.T) string {
	t.Helper()
	out, err := fixture.LVM(ctxT(t), "lvmconfig", "--typeconfig", "full", "global/locking_dir")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(out), "locking_dir=")
	if !ok {
		t.Fatalf("lvmconfig global/locking_dir printed %q", out)
	}
	return strings.Trim(v, `"`)
}

// lockVG takes a shared flock on LVM's lock file of a volume group, as
// LVM does (it retries when the file it locked was unlinked meanwhile),
// and returns its release, which may be called more than once.
func lockVG(t *testing.T, path string) (unlock func()) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o777)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
			t.Fatalf("flock %s: %v", path, err)
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return sync.OnceFunc(func() { f.Close() })
		}
		f.Close()
	}
}

// childCommand returns the PID of a child of parent whose command line
// starts with args, or 0. It reads the children lists of parent's
// threads (CONFIG_PROC_CHILDREN) instead of every process in /proc: under
// TCG a walk of /proc takes tens of milliseconds, and the snapshot tests
// must catch a command within a few of its exec, before it acts.
func childCommand(parent int, args ...string) int {
	lists, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", parent))
	if err != nil {
		return 0
	}
	want := strings.Join(args, "\x00") + "\x00"
	for _, l := range lists {
		b, err := os.ReadFile(l)
		if err != nil {
			continue // the thread exited
		}
		for _, f := range strings.Fields(string(b)) {
			cmdline, err := os.ReadFile(filepath.Join("/proc", f, "cmdline"))
			if err != nil || !strings.HasPrefix(string(cmdline), want) {
				continue
			}
			if pid, err := strconv.Atoi(f); err == nil {
				return pid
			}
		}
	}
	return 0
}

// procStat returns the parent PID and state letter of pid.
func procStat(pid int) (ppid int, state string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	// "PID (COMM) STATE PPID ...": COMM may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, "", fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0], err
}

// flockWaiter reports whether pid is blocked waiting for a flock: a
// "->" line of /proc/locks names the waiters.
func flockWaiter(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		// "1: -> FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"
		f := strings.Fields(line)
		if len(f) > 5 && f[1] == "->" && f[2] == "FLOCK" && f[5] == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// waitGone waits until pid has exited (a zombie counts: it runs no more
// and holds nothing) and describes it if it still runs at the timeout.
func waitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ppid, state, err := procStat(pid)
		if errors.Is(err, os.ErrNotExist) || state == "Z" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still runs (state %s, parent %d)", pid, state, ppid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
