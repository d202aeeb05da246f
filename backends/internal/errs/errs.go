// Package errs builds the *backends.Error values the backends return.
package errs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
)

// Wrap returns nil for nil, err unchanged if it already is a
// *backends.Error, and a *backends.Error with op, store and volume around it
// otherwise.
func Wrap(op, store, volume string, err error) error {
	if err == nil {
		return nil
	}
	if be := (*backends.Error)(nil); errors.As(err, &be) {
		return err
	}
	return &backends.Error{Op: op, Store: store, Volume: volume, Err: err}
}

// New returns an error wrapping sentinel (one of the backends.Err* values)
// and cause (which may be nil), described by the format.
func New(sentinel, cause error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if cause == nil {
		return fmt.Errorf("%w: %s", sentinel, msg)
	}
	return fmt.Errorf("%w: %s: %w", sentinel, msg, cause)
}

// Command returns the *command.Error in err's chain, or nil.
func Command(err error) *command.Error {
	if ce := (*command.Error)(nil); errors.As(err, &ce) {
		return ce
	}
	return nil
}

// StderrContains reports whether err carries a failed command whose standard
// error contains any of the messages.
func StderrContains(err error, msgs ...string) bool {
	ce := Command(err)
	if ce == nil {
		return false
	}
	for _, m := range msgs {
		if strings.Contains(ce.Stderr, m) {
			return true
		}
	}
	return false
}
