package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// CmdError is a failed external command: what was run, its exit status
// and what it wrote to stderr.
type CmdError struct {
	Op     string
	Cmd    []string
	Stderr string
	Err    error
}

func (e *CmdError) Error() string {
	msg := fmt.Sprintf("%s: %s: %v", e.Op, strings.Join(e.Cmd, " "), e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

func (e *CmdError) Unwrap() error { return e.Err }

// run runs one short command with a timeout, in a process group of its own
// that is killed as a whole on timeout or cancel, with LC_ALL=C so that
// the output the harness parses does not depend on the locale. It returns
// stdout.
func run(ctx context.Context, timeout time.Duration, stdin []byte, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := command(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timeout %v)", ctx.Err(), timeout)
		}
		return stdout.Bytes(), &CmdError{Op: "run", Cmd: append([]string{name}, args...), Stderr: stderr.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

// command is name with args in a process group of its own, killed as a
// whole when ctx ends, with LC_ALL=C.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Shell runs script with `sh -eux` in dir as an operator's terminal would:
// KUBECONFIG is the cluster's, and the cluster's binaries (kubectl, helm)
// come first on PATH. Each command (-x) and everything it prints go to
// out as they happen. The first command that fails ends the script.
func (c *Cluster) Shell(ctx context.Context, timeout time.Duration, dir, script string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := command(ctx, "sh", "-eux", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, "KUBECONFIG="+c.Kubeconfig, "PATH="+c.opts.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timeout %v)", ctx.Err(), timeout)
		}
		return &CmdError{Op: "shell", Cmd: []string{"sh", "-eux", "-c", "<script>"}, Err: err}
	}
	return nil
}

// daemon is one long-running component (etcd, kube-apiserver, the
// kubelet, containerd, ...). Its output goes to a log file that the
// harness dumps when something fails.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done is closed
}

// startDaemon starts bin with args in its own process group, logging to
// logDir/name.log.
func startDaemon(logDir, name, bin string, args ...string) (*daemon, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		f.Close()
		close(d.done)
	}()
	return d, nil
}

// exited reports whether the daemon has ended, and how.
func (d *daemon) exited() (bool, error) {
	select {
	case <-d.done:
		return true, d.err
	default:
		return false, nil
	}
}

// errKilled is stop's error for a daemon that needed SIGKILL.
var errKilled = errors.New("killed: it did not exit on SIGTERM in time")

// stop sends SIGTERM to the daemon's process group and SIGKILL after
// grace (the error then wraps errKilled). Stopping a daemon that has
// exited is a no-op.
func (d *daemon) stop(grace time.Duration) error {
	if ok, _ := d.exited(); ok {
		return nil
	}
	pgid := d.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", d.name, err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(grace):
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-d.done:
		return fmt.Errorf("stop %s: %w (%v)", d.name, errKilled, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stop %s: still running after SIGKILL", d.name)
	}
}

// tail returns the last n bytes of the daemon's log.
func (d *daemon) tail(n int64) string {
	return TailFile(d.log, n)
}

// TailFile is the last n bytes of the file at path, saying how much it
// left out, or why it could not read it; it reads only those bytes.
func TailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot stat %s: %v)", path, err)
	}
	off := fi.Size() - n
	prefix := ""
	if off < 0 {
		off = 0
	} else if off > 0 {
		prefix = fmt.Sprintf("(... first %d bytes left out)\n", off)
	}
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	return prefix + string(buf)
}
