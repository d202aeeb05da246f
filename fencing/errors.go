package fencing

import (
	"errors"
	"strconv"
)

var (
	// ErrRejected matches (errors.Is) every error by which the store
	// refuses a request under the decision table; RejectionReason says why.
	ErrRejected = errors.New("request refused by fencing")

	// ErrMissingToken is wrapped when a request carries no token.
	ErrMissingToken = errors.New("missing fencing token")

	// ErrMalformed is wrapped when a volume ID, lifecycle UID or request
	// kind is invalid.
	ErrMalformed = errors.New("malformed fencing request")

	// ErrLocked is wrapped by Open when another Store, in this process or
	// another, holds the directory.
	ErrLocked = errors.New("fencing directory is locked by another store")

	// ErrClosed is wrapped by every call on a closed Store.
	ErrClosed = errors.New("fencing store is closed")
)

// Error is the one error type the store returns.
//
// A refused request has a non-zero Reason, and errors.Is(err, ErrRejected)
// holds; Err then explains the decision (and wraps ErrCorruptMark for an
// unreadable mark, ErrMalformed or ErrMissingToken for bad input). An error
// with Reason Accepted is an operational failure instead (a write that did
// not become durable, a cancelled context, a closed store): the request was
// not admitted either, and may be retried. The operator's recovery
// functions refuse with Reason Accepted and an Err that wraps
// ErrRecoveryRefused: those are not decisions of the table.
type Error struct {
	// Op is the store operation: "open", "advance", "end", "do",
	// "do end", "get", "retire", "close", or one of the operator's:
	// "inspect", "end lifecycle", "reset mark", "reset ledger".
	Op string
	// VolumeID is the volume concerned, if any. It may hold any bytes and
	// is quoted in Error().
	VolumeID string
	// Path is the mark file, the ledger or the directory concerned.
	Path string
	// Reason is why the request was refused, or Accepted for operational
	// failures.
	Reason Reason
	// Err is the cause.
	Err error
}

func (e *Error) Error() string {
	s := "fencing: " + e.Op
	if e.VolumeID != "" {
		s += " volume " + strconv.Quote(e.VolumeID)
	}
	if e.Path != "" {
		s += " (" + e.Path + ")"
	}
	if e.Reason != Accepted {
		s += ": refused, " + e.Reason.String()
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRejected) true for refused requests.
func (e *Error) Is(target error) bool { return target == ErrRejected && e.Reason != Accepted }

// RejectionReason returns why err refused a request, or Accepted if err is
// nil or not a refusal.
func RejectionReason(err error) Reason {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return Accepted
}

// IsRejected reports whether err refuses a request under the decision
// table (as opposed to an operational failure).
func IsRejected(err error) bool { return errors.Is(err, ErrRejected) }
