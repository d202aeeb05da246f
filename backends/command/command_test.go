package command_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

func TestExecOutput(t *testing.T) {
	out, err := command.Exec{}.Run(context.Background(), "sh", "-c", `printf 'out\n'; printf 'err\n' >&2`)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "out\n" {
		t.Fatalf("stdout %q, want %q", out, "out\n")
	}
}

func TestExecFailureKeepsExitCodeAndStderr(t *testing.T) {
	out, err := command.Exec{}.Run(context.Background(), "sh", "-c", `echo partial; echo "no such thing" >&2; exit 5`)
	var ce *command.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T), want *command.Error", err, err)
	}
	if ce.ExitCode != 5 || ce.Stderr != "no such thing\n" || string(out) != "partial\n" {
		t.Fatalf("exit %d, stderr %q, stdout %q; want 5, %q, %q", ce.ExitCode, ce.Stderr, out, "no such thing\n", "partial\n")
	}
	if want := "sh -c"; !strings.HasPrefix(ce.Error(), want) || !strings.Contains(ce.Error(), "no such thing") {
		t.Fatalf("message %q lacks the command or its stderr", ce.Error())
	}
}

func TestExecEnvironment(t *testing.T) {
	t.Setenv("LC_ALL", "de_DE.UTF-8")
	t.Setenv("LANG", "de_DE.UTF-8")
	out, err := command.Exec{}.Run(context.Background(), "sh", "-c", `echo "$LC_ALL"`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "C" {
		t.Fatalf("LC_ALL=%q in the child, want C", got)
	}
}

func TestExecStdinIsEmpty(t *testing.T) {
	// A tool that prompts must read end-of-file, not wait for an answer.
	out, err := command.Exec{Timeout: 10 * time.Second}.Run(context.Background(), "sh", "-c", `read answer; echo "status $?"`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "status 1" {
		t.Fatalf("read from stdin gave %q, want end-of-file (status 1)", got)
	}
}

func TestExecNotFound(t *testing.T) {
	_, err := command.Exec{}.Run(context.Background(), "pillar-csi-no-such-tool")
	var ce *command.Error
	if !errors.As(err, &ce) || ce.ExitCode != -1 {
		t.Fatalf("error %v, want *command.Error with exit code -1", err)
	}
}

func TestExecStderrIsBounded(t *testing.T) {
	_, err := command.Exec{}.Run(context.Background(), "sh", "-c", `head -c 200000 /dev/zero | tr '\0' x >&2; exit 1`)
	var ce *command.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want *command.Error", err)
	}
	if len(ce.Stderr) < command.MaxStderr || len(ce.Stderr) > command.MaxStderr+64 || !strings.HasSuffix(ce.Stderr, "[standard error truncated]") {
		t.Fatalf("kept %d bytes of stderr ending %q, want %d and a truncation note", len(ce.Stderr), ce.Stderr[max(0, len(ce.Stderr)-40):], command.MaxStderr)
	}
}

// TestExecTimeoutKillsProcessGroup runs a shell that starts a grandchild
// and waits for it. On timeout the whole group must die: killing only the
// shell would leave the grandchild running (and holding the pipes).
func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	out, err := command.Exec{Timeout: 500 * time.Millisecond}.Run(context.Background(), "sh", "-c", `sleep 300 & echo $!; wait`)
	assertKilled(t, out, err, context.DeadlineExceeded)
}

func TestExecCancelKillsProcessGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	out, err := command.Exec{}.Run(ctx, "sh", "-c", `sleep 300 & echo $!; wait`)
	assertKilled(t, out, err, context.Canceled)
}

func assertKilled(t *testing.T, out []byte, err, cause error) {
	t.Helper()
	var ce *command.Error
	if !errors.As(err, &ce) || !errors.Is(err, cause) || ce.ExitCode != -1 {
		t.Fatalf("error %v, want a *command.Error wrapping %v with exit code -1", err, cause)
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	if perr != nil {
		t.Fatalf("no grandchild PID in %q", out)
	}
	// The grandchild was killed; it may linger as a zombie until its new
	// parent reaps it, but it must not be running.
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, alive := processState(pid)
		if !alive || state == "Z" {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("grandchild %d still running (state %s) after the command was killed", pid, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processState returns the state letter of pid from /proc/PID/stat.
func processState(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// "PID (COMM) STATE ...": COMM may contain spaces, so split after ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) == 0 {
		return "", false
	}
	return f[0], true
}

func TestExecInput(t *testing.T) {
	out, err := command.Exec{}.RunInput(context.Background(), []byte("line one\nline two\n"), "wc", "-l")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != "2" {
		t.Fatalf("wc -l of two lines on standard input printed %q", out)
	}
	// Without input, standard input is /dev/null: cat ends at once.
	out, err = command.Exec{}.RunInput(context.Background(), nil, "cat")
	if err != nil || len(out) != 0 {
		t.Fatalf("cat without input: %q, %v; want no output", out, err)
	}
}
