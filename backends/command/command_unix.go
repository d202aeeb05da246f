//go:build unix

package command

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the command in a new process group and makes
// cancellation kill that whole group: the tools fork helpers that would
// otherwise outlive a killed parent.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The group's ID is the child's PID (Setpgid with Pgid 0).
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// setRoot makes the command run chrooted into root, in its "/".
func setRoot(cmd *exec.Cmd, root string) error {
	cmd.SysProcAttr.Chroot = root
	cmd.Dir = "/"
	return nil
}
