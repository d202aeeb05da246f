package server

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/fencing"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestToStatus(t *testing.T) {
	live := context.Background()
	expired, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	be := func(sentinel error) error {
		return &backends.Error{Op: "create", Store: "vg0", Volume: "pvc-1", Err: errors.Join(sentinel, &command.Error{Cmd: []string{"lvm", "lvcreate"}, ExitCode: 5, Stderr: "x"})}
	}
	cf := func(errno error) error {
		return &configfs.Error{Op: "symlink", Path: "/sys/kernel/config/nvmet/ports/1/subsystems/n", Err: errno}
	}
	toolTimeout := &backends.Error{Op: "create", Err: &command.Error{Cmd: []string{"zfs"}, ExitCode: -1, Err: errors.Join(errors.New("signal: killed"), context.DeadlineExceeded)}}
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want codes.Code
	}{
		{"invalid", live, be(backends.ErrInvalidArgument), codes.InvalidArgument},
		{"not found", live, be(backends.ErrNotFound), codes.NotFound},
		{"store not found", live, be(backends.ErrStoreNotFound), codes.FailedPrecondition},
		{"conflict", live, be(backends.ErrConflict), codes.AlreadyExists},
		{"no space", live, be(backends.ErrNoSpace), codes.ResourceExhausted},
		{"shrink", live, be(backends.ErrShrink), codes.FailedPrecondition},
		{"busy", live, be(backends.ErrBusy), codes.FailedPrecondition},
		{"thin pool not zeroing", live, &backends.Error{Op: "capacity", Store: "vg0/thinpool", Err: backends.ErrThinPoolNotZeroing}, codes.FailedPrecondition},
		{"unclassified tool failure", live, &backends.Error{Op: "create", Err: &command.Error{Cmd: []string{"zfs"}, ExitCode: 1}}, codes.Internal},
		{"tool missing", live, &backends.Error{Op: "create", Err: &command.Error{Cmd: []string{"zfs"}, ExitCode: -1, Err: exec.ErrNotFound}}, codes.Unimplemented},
		{"tool timeout, caller alive", live, toolTimeout, codes.Unavailable},
		{"caller deadline", expired, toolTimeout, codes.DeadlineExceeded},
		{"caller cancelled", cancelled, fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{"configfs invalid", live, cf(syscall.EINVAL), codes.InvalidArgument},
		{"configfs validation", live, &configfs.Error{Op: "validate", Path: "Ports[0]", Err: configfs.ErrInvalid}, codes.InvalidArgument},
		{"configfs address in use", live, cf(syscall.EADDRINUSE), codes.FailedPrecondition},
		{"configfs address missing", live, cf(syscall.EADDRNOTAVAIL), codes.FailedPrecondition},
		{"configfs busy", live, cf(syscall.EBUSY), codes.FailedPrecondition},
		{"configfs not empty", live, cf(syscall.ENOTEMPTY), codes.FailedPrecondition},
		{"configfs exists", live, cf(syscall.EEXIST), codes.AlreadyExists},
		{"configfs missing (nvmet not loaded)", live, cf(syscall.ENOENT), codes.FailedPrecondition},
		{"configfs other errno", live, cf(syscall.EIO), codes.Internal},
		{"fencing closed", live, &fencing.Error{Op: "do", Err: fencing.ErrClosed}, codes.Unavailable},
		{"fencing not durable", live, &fencing.Error{Op: "do", Err: syscall.ENOSPC}, codes.Internal},
		{"already a status", live, status.Error(codes.Aborted, "busy"), codes.Aborted},
	} {
		err := toStatus(c.ctx, "CreateVolume", "pvc-1", c.err)
		st, ok := status.FromError(err)
		if !ok || st.Code() != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if c.want != codes.Aborted && st.Message() != "CreateVolume volume \"pvc-1\": "+c.err.Error() {
			t.Errorf("%s: message %q does not carry the cause", c.name, st.Message())
		}
		// Only a refused store carries the StoreRefusal detail.
		if ref, ok := agentv1.StoreRefusalOf(err); ok != backends.IsThinPoolNotZeroing(c.err) ||
			(ok && ref.GetReason() != agentv1.StoreRefusal_REASON_THIN_POOL_NOT_ZEROING) {
			t.Errorf("%s: StoreRefusal detail %v, %v", c.name, ref, ok)
		}
	}
	if toStatus(live, "x", "", nil) != nil {
		t.Error("nil error mapped to a status")
	}
}
