package kernelvm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// fakeQEMU stands in for qemu-system-x86_64: it finds the run's output
// share among its arguments, as the guest's init would mount it, and acts
// out what FAKE_QEMU_MODE says a guest did.
const fakeQEMU = `#!/bin/sh
for a in "$@"; do
	case "$a" in
	*mount_tag=labout*) out=${a#local,path=}; out=${out%%,mount_tag=*} ;;
	esac
done
printf '%s\n' "$@" > "$out/qemu-args"
printf 'SeaBIOS\r\npillar-lab: guest userspace up\r\n'
case "$FAKE_QEMU_MODE" in
ok)      echo "the guest says hi"; echo 3 > "$out/exit-status" ;;
panic)   echo "Kernel panic - not syncing" ;;
initerr) echo "cannot mount configfs" > "$out/init-error" ;;
hang)    sleep 600 & echo $! > "$FAKE_QEMU_PIDFILE"; wait ;;
lockup)  printf '[   60.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [etcd:327]\r\n'
         printf '[   69.1] watchdog: BUG: soft lockup - CPU#0 stuck for 31s! [etcd:327]\r\n'
         sleep 600 & echo $! > "$FAKE_QEMU_PIDFILE"; wait ;;
esac
`

func fakeLab(t *testing.T, mode string) *Lab {
	t.Helper()
	dir := t.TempDir()
	q := filepath.Join(dir, "qemu")
	if err := os.WriteFile(q, []byte(fakeQEMU), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_QEMU_MODE", mode)
	return &Lab{CacheDir: filepath.Join(dir, "cache"), QEMU: q, Kernel: "vmlinuz", Initramfs: "initrd"}
}

func boot(t *testing.T, lab *Lab, vm VMConfig) (*Run, BootResult, string, error) {
	t.Helper()
	r, err := lab.NewRun()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var lines []string
	res, err := r.Boot(context.Background(), BootOptions{VM: vm, Script: CommandScript("/", []string{"true"}), Stdout: &out,
		OnLine: func(l string) { lines = append(lines, l) }})
	if len(lines) > 0 && strings.ContainsRune(strings.Join(lines, ""), '\r') {
		t.Errorf("console lines keep carriage returns: %q", lines)
	}
	return r, res, out.String(), err
}

func TestBootExitStatus(t *testing.T) {
	r, res, out, err := boot(t, fakeLab(t, "ok"), VMConfig{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 3 {
		t.Errorf("exit status %d, want the guest's 3", res.ExitStatus)
	}
	if !strings.Contains(out, "the guest says hi\n") || strings.Contains(out, "\r") {
		t.Errorf("console %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(r.Dir, "console.log")); err != nil || string(b) != out {
		t.Errorf("console.log %q, %v; want the streamed console", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(r.Dir, "guest.sh")); err != nil || !strings.Contains(string(b), "exec true") {
		t.Errorf("guest.sh %q, %v", b, err)
	}
	b, err := os.ReadFile(filepath.Join(r.OutDir(), "qemu-args"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	var appendArg string
	for i, a := range args {
		if a == "-append" && i+1 < len(args) {
			appendArg = args[i+1]
		}
		if a == "-enable-kvm" || strings.Contains(a, "accel=kvm") || (a == "-accel" && args[i+1] != "tcg") {
			t.Errorf("QEMU asked for KVM: %q", args)
		}
	}
	// The marker must be exactly what package guest checks.
	if !strings.Contains(" "+appendArg+" ", " "+guest.Marker+" ") || !strings.Contains(appendArg, "pillar.run="+r.Dir) {
		t.Errorf("kernel command line %q lacks the lab marker or the run directory", appendArg)
	}
}

func TestBootFailures(t *testing.T) {
	for _, tc := range []struct{ mode, want string }{
		{"panic", "no exit status from the guest"},
		{"initerr", "guest init failed: cannot mount configfs"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			_, _, _, err := boot(t, fakeLab(t, tc.mode), VMConfig{Timeout: time.Minute})
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want an *Error saying %q", err, tc.want)
			}
		})
	}
}

// The hard timeout kills QEMU and everything in its process group.
func TestBootTimeoutKillsGroup(t *testing.T) {
	lab := fakeLab(t, "hang")
	pidfile := filepath.Join(t.TempDir(), "pid")
	t.Setenv("FAKE_QEMU_PIDFILE", pidfile)
	start := time.Now()
	_, _, _, err := boot(t, lab, VMConfig{Timeout: 500 * time.Millisecond})
	if !IsTimeout(err) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Boot returned after %v", d)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d of the fake QEMU survived the timeout", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunsDoNotShare(t *testing.T) {
	lab := fakeLab(t, "ok")
	a, err := lab.NewRun()
	if err != nil {
		t.Fatal(err)
	}
	b, err := lab.NewRun()
	if err != nil {
		t.Fatal(err)
	}
	if a.Dir == b.Dir || a.OutDir() == b.OutDir() {
		t.Fatalf("two runs share %s", a.Dir)
	}
	if !strings.HasPrefix(a.Dir, filepath.Join(lab.CacheDir, "runs")+"/") {
		t.Errorf("run %s is not under the cache", a.Dir)
	}
}

// alive reports whether pid runs; a zombie (killed, not yet reaped by
// whoever inherited it) does not.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// A guest kernel that reports a CPU stuck past the limit is killed at
// once, not at the boot's timeout; shorter reports are let pass.
func TestBootLockupKills(t *testing.T) {
	lab := fakeLab(t, "lockup")
	t.Setenv("FAKE_QEMU_PIDFILE", filepath.Join(t.TempDir(), "pid"))
	start := time.Now()
	_, _, out, err := boot(t, lab, VMConfig{Timeout: time.Minute, LockupLimit: 30 * time.Second})
	if !errors.Is(err, ErrLockup) || IsTimeout(err) {
		t.Fatalf("err = %v, want ErrLockup", err)
	}
	if !strings.Contains(err.Error(), "CPU#0 stuck for 31s! [etcd:327]") {
		t.Errorf("err = %v, want the report that passed the limit", err)
	}
	if !strings.Contains(out, "stuck for 22s") {
		t.Errorf("console %q lacks the earlier report", out)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Boot returned after %v", d)
	}
}

func TestSoftLockup(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		ok   bool
	}{
		{"[ 2408.593905] watchdog: BUG: soft lockup - CPU#1 stuck for 2172s! [etcd:327]", 2172 * time.Second, true},
		{"watchdog: BUG: soft lockup - CPU#12 stuck for 22s! [kworker/1:2:88]", 22 * time.Second, true},
		{"rcu: INFO: rcu_sched self-detected stall on CPU", 0, false},
		{"soft lockup - CPU#1 stuck for", 0, false},
	} {
		got, ok := softLockup(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("softLockup(%q) = %v, %v; want %v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}
