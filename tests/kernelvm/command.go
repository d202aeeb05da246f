package kernelvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// commander runs the host commands provisioning needs (apt-get, dpkg-deb,
// depmod, make, ...). It is the lab's one choke point for external
// commands: every command gets a deadline, LC_ALL=C (we parse apt's and
// dpkg's output), its own process group so a cancelled `make -j` takes its
// compilers with it, and its standard error in the returned error.
type commander struct {
	log io.Writer // progress and streamed output; never nil
}

// cmdOpts says how one command runs.
type cmdOpts struct {
	dir     string
	env     []string      // added to the environment
	timeout time.Duration // 0 means the caller's context alone
	stream  bool          // copy stdout and stderr to the log while running
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

// run runs name with args and returns its standard output (empty when
// streamed). op names the step for the error.
func (c *commander) run(ctx context.Context, op string, o cmdOpts, name string, args ...string) ([]byte, error) {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = o.dir
	cmd.Env = append(append(os.Environ(), "LC_ALL=C", "LANG=C"), o.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Kill the whole group: make, configure and apt-get all fork.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 10 * time.Second
	var stdout bytes.Buffer
	stderr := &tailWriter{max: 8 << 10}
	if o.stream {
		cmd.Stdout = io.MultiWriter(c.log, stderr)
		cmd.Stderr = io.MultiWriter(c.log, stderr)
	} else {
		cmd.Stdout = &stdout
		cmd.Stderr = stderr
	}
	err := cmd.Run()
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", ErrTimeout, err)
		}
		return stdout.Bytes(), &Error{Op: op, Cmd: cmd.Args, Stderr: string(stderr.buf), Err: err}
	}
	return stdout.Bytes(), nil
}
