package tlsconfig

import "fmt"

// Error is returned for TLS material that cannot be read or used. Op is
// what failed ("read", "parse", "check"), Path the file (or files) it
// failed on.
type Error struct {
	Op   string
	Path string
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Op, e.Path, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
