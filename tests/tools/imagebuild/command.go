package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// CommandError is a failed external command, with its exit status and what
// it printed, so that the caller can tell "not in the archive" from "no
// network".
type CommandError struct {
	Cmd    []string
	Status int // -1 when it did not exit on its own
	Output string
	Err    error
}

func (e *CommandError) Error() string {
	out := strings.TrimSpace(e.Output)
	if out != "" {
		out = ": " + out
	}
	return fmt.Sprintf("%s: %v%s", strings.Join(e.Cmd, " "), e.Err, out)
}

func (e *CommandError) Unwrap() error { return e.Err }

// runner runs external commands. Each has a timeout, runs in a process
// group of its own that is killed whole when the context ends (so an
// apt-get's children are never orphaned), and runs with LC_ALL=C so that
// messages are the ones this program matches.
type runner struct {
	timeout time.Duration
	env     []string // added to a minimal environment
}

// lookPath finds a command in the PATH of env (the last one wins, as it
// does for the child), not in this process's PATH.
func lookPath(name string, env []string) string {
	if strings.Contains(name, "/") {
		return name
	}
	var dirs string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			dirs = v
		}
	}
	for _, d := range filepath.SplitList(dirs) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return name // exec reports it as not found
}

// run runs name args in dir and returns its combined output.
func (r runner) run(ctx context.Context, dir string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	env := append([]string{"LC_ALL=C", defaultPath}, r.env...)
	cmd := exec.CommandContext(ctx, lookPath(argv[0], env), argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		return out.String(), nil
	}
	status := -1
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		status = exit.ExitCode()
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (after %s)", ctx.Err(), r.timeout)
	}
	return out.String(), &CommandError{Cmd: argv, Status: status, Output: out.String(), Err: err}
}
