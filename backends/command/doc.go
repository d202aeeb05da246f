// Package command is the one choke point through which the backends run
// their tools (zfs, zpool, lvm).
//
// Exec runs a command with:
//
//   - a deadline: the caller's context, bounded by a per-command timeout;
//   - LC_ALL=C, because the backends classify failures by the tools' English
//     messages and parse numbers that a locale could reformat;
//   - standard input from /dev/null, so that a tool that would prompt reads
//     end-of-file instead of hanging;
//   - its own process group, killed whole with SIGKILL when the context is
//     cancelled or times out. Tools fork helpers (lvm runs thin_check and
//     blkid, zfs may run mount); killing only the direct child leaves those
//     running with the store locked, the orphaned-process bug the process
//     group prevents;
//   - standard error captured (the first MaxStderr bytes) and returned in an
//     *Error together with the exit code.
//
// Runner is the interface the backends take, so that a caller can wrap the
// tools (for example to run them in the host's mount namespace) and tests
// can replay captured output.
package command
