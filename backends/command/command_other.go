//go:build !unix

package command

import (
	"errors"
	"os/exec"
)

// setProcessGroup leaves exec's default cancellation (kill the child) on
// systems without process groups; the backends' tools exist only on Linux.
func setProcessGroup(*exec.Cmd) {}

// setRoot refuses: only Linux hosts run the backends' tools.
func setRoot(*exec.Cmd, string) error {
	return errors.New("running commands under another root filesystem is supported on Linux only")
}
