package agentv1

// NewFencingError is the error an agent returns when fencing refuses a
// request: codes.FailedPrecondition with msg and rej attached as a status
// detail, so the caller can tell a fencing refusal (retrying cannot help)
// from any other failed precondition.
func NewFencingError(rej *FencingRejection, msg string) error {
	return preconditionError(rej, msg)
}

// FencingRejectionOf returns the FencingRejection carried by a gRPC error,
// and false when err is not a fencing refusal. It looks through wrapped
// errors.
func FencingRejectionOf(err error) (*FencingRejection, bool) {
	return preconditionDetail[*FencingRejection](err)
}
