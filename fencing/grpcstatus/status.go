// Package grpcstatus maps the errors of a fencing.Store to gRPC status
// errors, so that every server that fences its calls answers a stale
// request the same way: FAILED_PRECONDITION, with the refusal's reason in a
// google.rpc.ErrorInfo detail that clients read back with Reason.
//
// It lives apart from package fencing so that the core package does not
// depend on gRPC.
package grpcstatus

import (
	"context"
	"errors"
	"strconv"

	"github.com/pillar-csi/pillar-csi/fencing"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of fencing refusals.
const Domain = "fencing.pillar-csi.io"

// Metadata keys of the ErrorInfo detail.
const (
	// MetadataVolumeID holds the volume ID as a Go-quoted string, because a
	// volume ID may hold bytes that are not valid UTF-8.
	MetadataVolumeID = "volume_id"
)

// Error returns err as a gRPC status error:
//
//   - nil stays nil;
//   - a refusal by the decision table (fencing.IsRejected) becomes
//     FAILED_PRECONDITION, with an ErrorInfo whose Reason is the
//     fencing.Reason's name (for example "STALE_GENERATION"); the CSI
//     specification uses FAILED_PRECONDITION for a request the volume's
//     current state does not allow, and a retry cannot succeed unless the
//     caller obtains a newer token;
//   - an error that already carries a gRPC status (for example one returned
//     by the function run under fencing.Store.Do) is returned unchanged;
//   - a store that is locked by another process or closed becomes
//     UNAVAILABLE, which callers may retry;
//   - a cancelled or expired context becomes CANCELED or DEADLINE_EXCEEDED;
//   - anything else, such as a mark that could not be written durably,
//     becomes INTERNAL: the request was not admitted.
func Error(err error) error {
	if err == nil {
		return nil
	}
	if fencing.IsRejected(err) {
		return rejection(err)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	// Before the context cases: Open gives up on a locked directory when
	// its context expires, and wraps both.
	case errors.Is(err, fencing.ErrLocked), errors.Is(err, fencing.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func rejection(err error) error {
	st := status.New(codes.FailedPrecondition, err.Error())
	info := &errdetails.ErrorInfo{Reason: fencing.RejectionReason(err).String(), Domain: Domain}
	var fe *fencing.Error
	if errors.As(err, &fe) && fe.VolumeID != "" {
		info.Metadata = map[string]string{MetadataVolumeID: strconv.Quote(fe.VolumeID)}
	}
	if withInfo, derr := st.WithDetails(info); derr == nil {
		st = withInfo
	}
	return st.Err()
}

// Reason returns the fencing reason carried by a status error that Error
// made from a refusal, on either side of the connection; ok is false for
// any other error.
func Reason(err error) (r fencing.Reason, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.FailedPrecondition {
		return 0, false
	}
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo && info.GetDomain() == Domain {
			return fencing.ParseReason(info.GetReason())
		}
	}
	return 0, false
}
