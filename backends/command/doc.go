// Package command is the one choke point through which the backends run
// their tools (zfs, zpool, lvm).
//
// Exec runs a command with:
//
//   - a deadline: the caller's context, bounded by a per-command timeout;
//   - LC_ALL=C, because the backends classify failures by the tools' English
//     messages and parse numbers that a locale could reformat;
//   - standard input from /dev/null, so that a tool that would prompt reads
//     end-of-file instead of hanging, or the caller's data (RunInput);
//   - its own process group, killed whole with SIGKILL when the context is
//     cancelled or times out. Tools fork helpers (lvm runs thin_check and
//     blkid, zfs may run mount); killing only the direct child leaves those
//     running with the store locked, the orphaned-process bug the process
//     group prevents;
//   - on Linux, SIGKILL from the kernel when the process that runs it dies
//     (the parent-death signal): when pillar-agent is SIGKILLed or killed
//     by the OOM killer, an lvcreate or zfs create in flight dies with it
//     instead of holding the store's lock and finishing a change nobody
//     will record. Run keeps its goroutine on the thread that started the
//     command until the command has been waited for, because the kernel
//     sends the signal when that thread, not the process, exits. The
//     tool's own helpers are not signalled (the kernel does not pass the
//     setting on to a fork's child): they run to their end, without the
//     store's lock, unless the agent was its PID namespace's init, whose
//     death kills the whole namespace;
//   - standard error captured (the first MaxStderr bytes) and returned in an
//     *Error together with the exit code;
//   - optionally (Exec.Root) the tools of another root filesystem, run
//     chrooted into it: pillar-agent's container runs the host's own zfs,
//     zpool and lvm this way, from the host's "/" mounted into the
//     container, so the userland matches the host's kernel module and LVM
//     metadata is written by one LVM build with one configuration.
//
// Runner is the interface the backends take, so that a caller can wrap the
// tools and tests can replay captured output; InputRunner adds standard
// input, for the backends that pass a tool a script.
package command
