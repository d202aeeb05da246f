//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris)

package fencing

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// The store needs flock(2) and an atomic rename over an existing file with
// a directory fsync; on other systems it refuses to open instead of keeping
// marks it cannot keep safely. Tokens, Decide and the file-name mapping work
// everywhere.
var errNoStore = fmt.Errorf("%w: the fencing store is not available on %s", errors.ErrUnsupported, runtime.GOOS)

func tryLockDir(*os.File) (bool, error)                      { return false, errNoStore }
func unlockDir(*os.File) error                               { return errNoStore }
func writeFileAtomic(*os.File, string, string, []byte) error { return errNoStore }
func syncDir(*os.File) error                                 { return errNoStore }
