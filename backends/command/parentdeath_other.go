//go:build !linux

package command

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal;
// the backends' tools exist only on Linux.
func dieWithParent(*exec.Cmd) (release func()) { return func() {} }
