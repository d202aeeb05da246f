package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Runner runs an external command and returns its standard output.
//
// A command that could not be started, exited with a non-zero status or was
// killed returns an *Error (possibly wrapped); its standard output up to that
// point is returned as well.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// InputRunner is a Runner that can also give a command data on its standard
// input, such as the script of a ZFS channel program.
type InputRunner interface {
	Runner
	// RunInput runs name with args as Run does, with input on its standard
	// input; nil input is the same as Run.
	RunInput(ctx context.Context, input []byte, name string, args ...string) ([]byte, error)
}

// DefaultTimeout bounds a command when Exec.Timeout is zero. Storage
// commands normally take well under a second; ZFS waits for transaction
// groups to sync and LVM for its locks, which on a loaded node can take
// tens of seconds.
const DefaultTimeout = 2 * time.Minute

// MaxStderr is how much of a command's standard error an *Error keeps.
const MaxStderr = 64 << 10

// killGrace is how long Wait waits for the output pipes after the process
// group was killed: a descendant that left the group may still hold them.
const killGrace = 5 * time.Second

// Exec runs commands on this machine. The zero value is ready to use.
type Exec struct {
	// Timeout bounds every command; DefaultTimeout if zero. An earlier
	// deadline of the caller's context wins.
	Timeout time.Duration
	// Root, if not empty, is a directory holding another root filesystem
	// (the host's "/" mounted into a container): each command is looked up
	// in that tree's standard bin directories and runs chrooted into it,
	// with "/" as its working directory. The tools, their libraries and
	// their configuration (/etc/lvm, /etc/zfs) are then the host's own, so
	// a zfs userland always matches the host's kernel module and LVM
	// metadata is written by the host's one LVM build. Linux only.
	Root string
}

// rootPath is where Exec looks for a command under Root: the usual PATH
// of a Linux host, system directories first.
var rootPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Run runs name with args; see the package documentation.
func (e Exec) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return e.RunInput(ctx, nil, name, args...)
}

// RunInput implements InputRunner: input, when not nil, is the command's
// standard input instead of /dev/null.
func (e Exec) RunInput(ctx context.Context, input []byte, name string, args ...string) ([]byte, error) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	file := name
	if e.Root != "" {
		var err error
		if file, err = lookPathIn(e.Root, name); err != nil {
			return nil, &Error{Cmd: append([]string{name}, args...), ExitCode: -1, Err: err}
		}
	}
	cmd := exec.CommandContext(ctx, file, args...)
	cmd.Args[0] = name
	// Later entries win: LC_ALL overrides LANG and any LC_* of ours.
	cmd.Env = append(cmd.Environ(), "LC_ALL=C")
	setProcessGroup(cmd)
	if e.Root != "" {
		if err := setRoot(cmd, e.Root); err != nil {
			return nil, &Error{Cmd: cmd.Args, ExitCode: -1, Err: err}
		}
	}
	cmd.WaitDelay = killGrace
	if input != nil {
		cmd.Stdin = bytes.NewReader(input)
	}
	var stdout bytes.Buffer
	stderr := &limitedBuffer{max: MaxStderr}
	cmd.Stdout, cmd.Stderr = &stdout, stderr

	release := dieWithParent(cmd)
	err := cmd.Run()
	release()
	if err == nil {
		return stdout.Bytes(), nil
	}
	cerr := &Error{Cmd: cmd.Args, ExitCode: -1, Stderr: stderr.String(), Err: err}
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.Exited() {
		cerr.ExitCode = ee.ExitCode()
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The process was killed because of the context: say so, and let
		// errors.Is(err, context.DeadlineExceeded) work.
		cerr.Err = errors.Join(err, ctxErr)
	}
	return stdout.Bytes(), cerr
}

// lookPathIn finds name in the bin directories of the root filesystem at
// root and returns its path inside that tree. A symbolic link counts as
// found without being followed: an absolute target means a path under root,
// which only the chrooted command resolves correctly.
func lookPathIn(root, name string) (string, error) {
	candidates := rootPath
	if strings.Contains(name, "/") {
		candidates = []string{path.Dir(path.Clean("/" + name))}
		name = path.Base(name)
	}
	for _, dir := range candidates {
		p := path.Join(dir, name)
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 || (fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0) {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: fmt.Errorf("%w in %s of the root filesystem at %s", exec.ErrNotFound, strings.Join(candidates, ":"), root)}
}

// Error is a command that failed.
type Error struct {
	Cmd      []string // the command line
	ExitCode int      // the exit status, or -1 if it did not exit (killed, not started)
	Stderr   string   // standard error, at most MaxStderr bytes
	Err      error    // *exec.ExitError, exec.ErrNotFound, ... and the context's error if it ended the command
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %v", strings.Join(e.Cmd, " "), e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + strings.Join(strings.Fields(s), " ")
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// limitedBuffer keeps the first max bytes written to it and discards the
// rest, while reporting every write as complete so the child never blocks
// or fails on a full pipe.
type limitedBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room < len(p) {
		b.truncated = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) String() string {
	if b.truncated {
		return b.buf.String() + "\n[standard error truncated]"
	}
	return b.buf.String()
}

var _ InputRunner = Exec{}
