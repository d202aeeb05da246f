// Package runner is the one place pillar-csi's CSI services start external
// commands (mkfs, blkid, resize2fs, xfs_growfs): each runs with a deadline,
// LC_ALL=C, in its own process group that is killed whole on timeout or
// cancel, and a failure carries the exit code and stderr.
package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// DefaultTimeout bounds a command whose context has no earlier deadline.
// mkfs.xfs of a large device discards it first, which can take a while.
const DefaultTimeout = 5 * time.Minute

// Runner runs external commands.
type Runner interface {
	// Run runs name with args and returns its standard output. A command
	// that does not exit 0 returns an *Error.
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Error is a command that failed to start, exited non-zero or timed out.
type Error struct {
	Cmd      []string
	ExitCode int // -1 when the command did not exit by itself
	Stderr   string
	Err      error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %v", strings.Join(e.Cmd, " "), e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode returns the exit code of a command that exited by itself with
// a non-zero status, and ok=false for any other error.
func ExitCode(err error) (code int, ok bool) {
	var e *Error
	if errors.As(err, &e) && e.ExitCode > 0 {
		return e.ExitCode, true
	}
	return 0, false
}

// Exec runs commands on the host.
type Exec struct {
	// Timeout bounds each command; DefaultTimeout when zero.
	Timeout time.Duration
}

// Run implements Runner.
func (x Exec) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	timeout := x.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(cmd.Environ(), "LC_ALL=C")
	// Its own process group, so that a timeout kills what the command
	// started too (mkfs helpers, for example), not just the parent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	e := &Error{Cmd: cmd.Args, ExitCode: -1, Stderr: stderr.String(), Err: err}
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() == nil {
		e.ExitCode = exit.ExitCode()
	}
	if ctx.Err() != nil {
		e.Err = errors.Join(err, ctx.Err())
	}
	return stdout.Bytes(), e
}
