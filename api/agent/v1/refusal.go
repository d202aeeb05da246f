package agentv1

// NewStoreRefusalError is the error an agent returns when it refuses to
// serve a store that exists: codes.FailedPrecondition with msg and ref
// attached as a status detail, so the caller can tell a refused store from
// a missing one.
func NewStoreRefusalError(ref *StoreRefusal, msg string) error {
	return preconditionError(ref, msg)
}

// StoreRefusalOf returns the StoreRefusal carried by a gRPC error, and false
// when err is not a refusal of the store. It looks through wrapped errors.
func StoreRefusalOf(err error) (*StoreRefusal, bool) {
	return preconditionDetail[*StoreRefusal](err)
}
