package kept

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// cancelGrace is how long a binary asked to stop has between SIGINT and
// SIGKILL: Go's test binaries exit on SIGINT at once, a stuck one must not
// hold the kept cluster.
const cancelGrace = 15 * time.Second

// Serve runs the channel's requests one after another, each binary with
// its Args and then extraArgs (the keeper's -cluster.attach), until the
// host asks it to stop (nil) or ctx ends (ctx's error). log gets one line
// per request.
func (ch Channel) Serve(ctx context.Context, extraArgs []string, log io.Writer, poll time.Duration) error {
	for {
		if exists(ch.path(downFile)) {
			return nil
		}
		r, ok, err := ch.next()
		if err != nil {
			return fmt.Errorf("serve the channel: %w", err)
		}
		if ok {
			fmt.Fprintf(log, "kept: request %s: %s %q in %s\n", r.ID, r.Binary, r.Args, r.Dir)
			st := ch.run(ctx, r, extraArgs, poll)
			if err := writeJSON(ch.statusFile(r.ID), st); err != nil {
				return fmt.Errorf("answer request %s: %w", r.ID, err)
			}
			fmt.Fprintf(log, "kept: request %s: exit status %d after %.1fs %s\n", r.ID, st.ExitStatus, st.Seconds, st.Error)
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// run runs one request's binary in a process group of its own, its output
// appended to the request's log, and stops it when the host cancels the
// request or asks the keeper to stop, or ctx ends.
func (ch Channel) run(ctx context.Context, r Request, extraArgs []string, poll time.Duration) Status {
	start := time.Now()
	fail := func(err error) Status {
		// The host shows the log; say there why nothing ran.
		if f, ferr := os.OpenFile(ch.logFile(r.ID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); ferr == nil {
			fmt.Fprintf(f, "kept: %v\n", err)
			f.Close()
		}
		return Status{ExitStatus: 125, Error: err.Error(), Seconds: time.Since(start).Seconds()}
	}
	out, err := os.OpenFile(ch.logFile(r.ID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(err)
	}
	defer out.Close()
	cmd := exec.Command(r.Binary, append(append([]string(nil), r.Args...), extraArgs...)...)
	cmd.Dir = r.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start %s: %w", r.Binary, err))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var stopAt time.Time // when SIGKILL follows the SIGINT sent
	var werr error
wait:
	for {
		select {
		case werr = <-done:
			break wait
		case <-time.After(poll):
		case <-ctx.Done():
		}
		switch {
		case !stopAt.IsZero():
			if time.Now().After(stopAt) {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		case ctx.Err() != nil || exists(ch.cancelFile(r.ID)) || exists(ch.path(downFile)):
			fmt.Fprintf(out, "kept: stopping the test binary (cancelled)\n")
			syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			stopAt = time.Now().Add(cancelGrace)
		}
	}
	// The binary's children (kubectl, sh) must not outlive it.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	st := Status{Seconds: time.Since(start).Seconds()}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		st.ExitStatus = ee.ExitCode()
		if st.ExitStatus < 0 { // killed by a signal
			st.ExitStatus = 1
			st.Error = werr.Error()
		}
	default:
		st.ExitStatus, st.Error = 125, werr.Error()
	}
	return st
}
