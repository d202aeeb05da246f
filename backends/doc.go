// Package backends defines the volume backend interface of pillar-csi: the
// contract between the agent and the storage on its node. Its
// implementations are in the sub-packages zfs (ZFS zvols, thick or sparse)
// and lvm (LVM logical volumes, linear or thin); both run their tools
// through the command package.
//
// # Contract
//
// A Backend manages the volumes of one store (a ZFS pool and parent dataset,
// or an LVM volume group and optional thin pool). Every volume carries its
// volume ID as an ownership mark (a ZFS user property, an LVM tag): List
// reports only marked volumes, and a Backend never resizes or destroys a
// volume that is not marked as the one it was asked for.
//
// Every method is idempotent, so that a caller may retry after any failure
// or timeout: Create of an existing volume of the same size succeeds, Delete
// of a missing volume succeeds, Expand to the current size succeeds.
// Implementations are safe for concurrent use on different volumes;
// serialising operations on one volume is the caller's job.
//
// Input is validated before any command runs: a volume ID must match
// VolumeIDPattern and sizes must be positive. Sizes are rounded up to the
// store's allocation unit (the zvol's volblocksize, the volume group's
// extent size) and the rounded size is what Create and Expand report.
//
// # Errors
//
// Methods return *Error. When the cause is known its chain wraps one of the
// sentinel errors (ErrInvalidArgument, ErrNotFound, ErrStoreNotFound,
// ErrConflict, ErrNoSpace, ErrShrink, ErrBusy, ErrThinPoolNotZeroing, ErrUnsupported); when
// a tool failed it also wraps the *command.Error with the command line, exit
// code and standard error. A failure the backend cannot classify (an unexpected message, a
// timeout, which also wraps context.DeadlineExceeded) wraps no sentinel.
// Callers map the sentinels to their own protocol (gRPC codes in the agent)
// with errors.Is.
//
// # Capacity and overcommit
//
// Capacity reports the store's physical size and the space still available
// for new volumes. For a thick store (linear LVs, zvols with a
// refreservation) available is what the tools report as free: the tools
// themselves refuse a volume that does not fit. A thin store (an LVM thin
// pool, sparse zvols) promises every volume its full size without
// reserving it, and the overcommit rule is:
//
//	available = ratio × physical size − promised
//
// where promised counts every thin volume at its full virtual size and
// everything else (thick volumes, other data) at what it uses, and ratio is
// the store's overcommit ratio, 1 unless configured (no overcommit: every
// thin volume can be filled completely at once). A thin Create or Expand
// that would take available below zero fails with ErrNoSpace, so that
// GetCapacity and provisioning agree.
//
// The ZFS backend admits sparse creates against a listing of the pool at
// most zfs.AdmissionMaxAge old, less what it admitted since, because a
// listing costs as much as the create. The LVM backend admits a thin
// create against a listing of the volume group begun after the create was
// asked for, less what was admitted since: one of its own, or the one
// another create began meanwhile, so that the creates of a burst share a
// listing or two while each still sees the thin pool as it was when it
// was asked for (whether it zeroes new chunks, above all).
//
// Admission decisions are made one at a time per store, but the commands
// they admit (zfs create and clone, zfs set volsize, lvcreate, lvextend)
// run side by side: a burst of creates takes about as long as the pool
// takes for them, not their sum. Until such a command ends, its bytes are
// reserved and count against every later decision, whether or not a
// listing shows them yet. A command that exited with an error gives its
// bytes back; one that was killed or did not return keeps them until the
// next listing.
//
// A backend finds the device of a volume it has made or looked up before
// without listing the volume again, as long as the device node is there;
// only a missing node makes it list. A ZFS look-up that finds no volume
// asks the module's statistics (/proc/spl/kstat/zfs), not zpool, whether
// the pool is there, and ZFS Gets made at once share one zfs list
// (backends.GetSharer).
//
// Allowed dependencies: the Go standard library and golang.org/x/sys. No
// Kubernetes and no gRPC: callers map backend errors to their own protocol.
package backends
