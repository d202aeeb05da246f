//go:build !unix

package command

import "os/exec"

// setProcessGroup leaves exec's default cancellation (kill the child) on
// systems without process groups; the backends' tools exist only on Linux.
func setProcessGroup(*exec.Cmd) {}
