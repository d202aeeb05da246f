package server

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/fencing"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// toStatus is the one place where the errors of the backends, of configfs
// and of the fencing store become gRPC codes. op and volumeID prefix the
// message, which keeps the tool's or kernel's own words (command line,
// stderr, configfs path, errno). ctx is the call's context: a timeout is
// DEADLINE_EXCEEDED when the caller's deadline passed, and UNAVAILABLE
// when only a tool's own timeout (Config.CommandTimeout) did, because the
// node was too slow and a retry may succeed.
//
// A refused store (an LVM thin pool that does not zero new chunks) is
// FAILED_PRECONDITION with a StoreRefusal detail, which tells it from a
// missing pool. Fencing refusals never reach this function; fenceError
// reports them with their FencingRejection detail.
func toStatus(ctx context.Context, op, volumeID string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	msg := op
	if volumeID != "" {
		msg += fmt.Sprintf(" volume %q", volumeID)
	}
	msg += ": " + err.Error()
	if backends.IsThinPoolNotZeroing(err) {
		// The detail tells the controller (a PillarStore's Ready
		// reason) that the store exists but is refused.
		return agentv1.NewStoreRefusalError(&agentv1.StoreRefusal{Reason: agentv1.StoreRefusal_REASON_THIN_POOL_NOT_ZEROING}, msg)
	}
	return status.Error(codeOf(ctx, err), msg)
}

func codeOf(ctx context.Context, err error) codes.Code {
	// An admitted act's context does not end with its caller; a wait in
	// it that gave up because the caller did reports the caller's end.
	ctx = endedFirst(ctx, waitContext(ctx))
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		if ctx.Err() != nil {
			return codes.DeadlineExceeded
		}
		return codes.Unavailable
	case errors.Is(err, context.Canceled):
		return codes.Unavailable

	// The fencing store: closed while shutting down, or locked by
	// another agent; anything else (a mark that could not be made
	// durable) is INTERNAL below.
	case errors.Is(err, fencing.ErrClosed), errors.Is(err, fencing.ErrLocked):
		return codes.Unavailable

	// A tool that is not installed: this node cannot serve the backend.
	case errors.Is(err, exec.ErrNotFound):
		return codes.Unimplemented

	// The backends' sentinels.
	case errors.Is(err, backends.ErrInvalidArgument):
		return codes.InvalidArgument
	case errors.Is(err, backends.ErrStoreNotFound):
		// The proto's FAILED_PRECONDITION "without the fencing detail":
		// the node cannot serve the store.
		return codes.FailedPrecondition
	case errors.Is(err, backends.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, backends.ErrConflict):
		return codes.AlreadyExists
	case errors.Is(err, backends.ErrNoSpace):
		return codes.ResourceExhausted
	case errors.Is(err, backends.ErrShrink), errors.Is(err, backends.ErrBusy):
		return codes.FailedPrecondition
	case errors.Is(err, backends.ErrUnsupported):
		// The store cannot (snapshots on linear LVM); the message names
		// the store's type and what would.
		return codes.FailedPrecondition
	case errors.Is(err, backends.ErrThinPoolNotZeroing):
		// The store exists but is refused until an operator turns the
		// thin pool's zeroing on or accepts the risk in the store.
		return codes.FailedPrecondition
	}

	var ce *configfs.Error
	if errors.As(err, &ce) {
		switch {
		case configfs.IsInvalid(err):
			// Refused before any write, or EINVAL from nvmet (for
			// example a port link to an address the transport cannot
			// parse).
			return codes.InvalidArgument
		case errors.Is(err, syscall.EADDRINUSE), errors.Is(err, syscall.EADDRNOTAVAIL):
			// nvmet-tcp cannot listen there: another listener holds the
			// address, or the node does not have it.
			return codes.FailedPrecondition
		case configfs.IsBusy(err):
			return codes.FailedPrecondition
		case configfs.IsExist(err):
			return codes.AlreadyExists
		case configfs.IsNotExist(err):
			// nvmet not loaded, or configfs not mounted: the node cannot
			// export until an operator fixes it.
			return codes.FailedPrecondition
		}
	}
	return codes.Internal
}

// endedFirst returns whichever of a and b has ended, a if neither has.
func endedFirst(a, b context.Context) context.Context {
	if a.Err() == nil && b.Err() != nil {
		return b
	}
	return a
}
