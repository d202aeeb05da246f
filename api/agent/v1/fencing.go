package agentv1

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NewFencingError is the error an agent returns when fencing refuses a
// request: codes.FailedPrecondition with msg and rej attached as a status
// detail, so the caller can tell a fencing refusal (retrying cannot help)
// from any other failed precondition.
func NewFencingError(rej *FencingRejection, msg string) error {
	st := status.New(codes.FailedPrecondition, msg)
	if rej == nil {
		return st.Err()
	}
	withDetail, err := st.WithDetails(rej)
	if err != nil {
		// WithDetails fails only when rej cannot be marshalled, which a
		// generated message always can; keep the code either way.
		return st.Err()
	}
	return withDetail.Err()
}

// FencingRejectionOf returns the FencingRejection carried by a gRPC error,
// and false when err is not a fencing refusal. It looks through wrapped
// errors.
func FencingRejectionOf(err error) (*FencingRejection, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return nil, false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.FailedPrecondition {
		return nil, false
	}
	for _, d := range st.Details() {
		if rej, ok := d.(*FencingRejection); ok {
			return rej, true
		}
	}
	return nil, false
}
