package agentv1

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// preconditionError is codes.FailedPrecondition with msg and, unless nil,
// detail attached, so that a caller can tell this refusal from any other
// failed precondition.
func preconditionError[T proto.Message](detail T, msg string) error {
	st := status.New(codes.FailedPrecondition, msg)
	if any(detail) == nil || !detail.ProtoReflect().IsValid() {
		return st.Err()
	}
	withDetail, err := st.WithDetails(protoadapt.MessageV1Of(detail))
	if err != nil {
		// WithDetails fails only when detail cannot be marshalled, which
		// a generated message always can; keep the code either way.
		return st.Err()
	}
	return withDetail.Err()
}

// preconditionDetail returns the detail of type T carried by a
// FailedPrecondition gRPC error, looking through wrapped errors, and false
// when there is none.
func preconditionDetail[T proto.Message](err error) (T, bool) {
	var zero T
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return zero, false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.FailedPrecondition {
		return zero, false
	}
	for _, d := range st.Details() {
		if v, ok := d.(T); ok {
			return v, true
		}
	}
	return zero, false
}
