//go:build linux

package command

import (
	"os/exec"
	"runtime"
	"syscall"
)

// dieWithParent has the kernel SIGKILL the command when the process that
// runs it dies, and returns the function to call once the command has
// been waited for.
//
// Without it a tool outlives a pillar-agent that is SIGKILLed or killed
// by the OOM killer: lvcreate or zfs create goes on holding the volume
// group's or the pool's lock and may finish a change that no agent will
// ever record or answer for. The process group's kill on cancellation
// cannot help there, because nobody is left to send it.
//
// The parent-death signal (prctl PR_SET_PDEATHSIG) fires when the thread
// that forked the child exits, not when the process does. A Go thread
// exits while its process lives on when a goroutine ends while locked to
// it with runtime.LockOSThread: the runtime then terminates that thread,
// and every child it had forked would be killed in the middle of its
// work (Go issue 27505). No code of ours does that, but a library or a
// test in the same process might, and the thread that forks is whichever
// one the goroutine happens to run on. So the goroutine locks itself to
// its thread before the fork and unlocks only after Wait has returned:
// the thread cannot be handed to another goroutine, cannot be ended by
// one, and outlives the child (moby/moby#44215 settled on the same). The
// cost is one thread per command in flight, a thread that spends the
// command's lifetime blocked in waitid anyway.
//
// Only the direct child gets the signal: the kernel clears the setting in
// the child of a fork, so the helpers a tool forks (lvm runs modprobe and
// thin_check, zfs may run mount) are not signalled. They are reparented
// to the nearest child subreaper or to init, keep their process group,
// and run to their end. They do not keep the store locked: LVM closes its
// lock files in the child before it executes a helper (exec_cmd calls
// reset_locking; thin_dump, the one helper it reads through a pipe
// without doing so, runs only for lvconvert --repair, which the backend
// never runs), so the lock dies with lvm itself. Where pillar-agent
// is its container's PID 1, as the chart runs it, the kernel kills every
// other process of the PID namespace when it dies, those helpers
// included; the parent-death signal covers every other way of running
// the agent (a shared PID namespace, a host service, the tests).
//
// The setting survives execve except into a set-user-ID or set-group-ID
// program or one with file capabilities; zfs, zpool and lvm are neither.
// Go closes the race of a parent that dies before the prctl: the child
// compares its parent with the one it was forked by and signals itself.
func dieWithParent(cmd *exec.Cmd) (release func()) {
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
