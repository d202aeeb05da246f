package kernelvm

import (
	"errors"
	"fmt"
	"strings"
)

// Error is the error every kernelvm operation returns: what the lab was
// doing (Op, e.g. "provision: install host packages"), the file or package
// it was about (Path), the command it ran (Cmd) with the tail of its
// standard error, and the cause.
type Error struct {
	Op     string
	Path   string
	Cmd    []string
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if e.Path != "" {
		b.WriteString(" ")
		b.WriteString(e.Path)
	}
	if len(e.Cmd) > 0 {
		fmt.Fprintf(&b, ": %s", strings.Join(e.Cmd, " "))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&b, "\n%s", s)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ErrTimeout is wrapped by an Error when the lab killed a command or a VM
// because it ran past its deadline.
var ErrTimeout = errors.New("timed out")

// ErrLockup is wrapped by an Error when the lab killed a VM whose kernel
// reported a CPU stuck for longer than its VMConfig.LockupLimit.
var ErrLockup = errors.New("guest kernel locked up")

// IsTimeout reports whether err says a command or VM ran out of time.
func IsTimeout(err error) bool { return errors.Is(err, ErrTimeout) }
