// Package zfs is the ZFS backend: every volume is a zvol named
// POOL[/PARENT]/ID, thick (with the refreservation ZFS sets by default) or
// sparse (zfs create -s, no refreservation).
//
// Ownership: a zvol belongs to a volume when its user property
// io.pillar-csi:volume-id (OwnerProperty) holds the volume ID. The property
// is set by the same zfs create that makes the zvol, so no zvol of ours ever
// lacks it.
//
// Behaviour of ZFS 2.1 that this package relies on, each proven in the
// kernel lab (tests/kernel/backends) and replayed from captured output in
// the unit tests:
//
//   - zfs create -V rounds volsize up to a multiple of volblocksize on its
//     own; the backend rounds first so that it knows and reports the size,
//     and always passes volblocksize (from the properties, else
//     DefaultVolBlockSize) so that the rounding unit never depends on the
//     ZFS release's default (8K in 2.1, 16K from 2.2).
//   - zfs set volsize accepts a smaller size and silently truncates the
//     zvol; Expand refuses a shrink before running anything. Growing a thick
//     zvol grows its refreservation too.
//   - Without udev there is no /dev/zvol/POOL/NAME link, only /dev/zdN, and
//     the minor is created asynchronously after zfs create returns.
//     DevicePath asks each /sys/block/zd* device for its dataset name with
//     the BLKZNAME ioctl, as udev's zvol_id helper does, and waits for it.
//     Asking opens the zvol, and an open zvol cannot be destroyed (EBUSY),
//     so the backend asks each device once and remembers the answer with
//     the disk's diskseq, which the kernel never reuses within a boot: a
//     minor ZFS gives again to another zvol is a new disk with a new
//     diskseq. A remembered answer is confirmed by asking that one device
//     before it is returned.
//   - zvols are created with volmode=dev, or none when the properties say
//     so, and no other: the storage node exposes the whole device and
//     never scans the partition table or LVM label a tenant wrote inside
//     it (full, geom and default are refused by New).
//   - Failures are reported with exit status 1 and an English message on
//     standard error ("dataset already exists", "parent does not exist",
//     "out of space", "dataset is busy", "no such pool"); usage errors with
//     exit status 2.
//   - A missing pool and a missing dataset give the same "dataset does not
//     exist" from zfs list; before it reports a volume as missing, the
//     backend asks whether the pool is imported: the module's statistics
//     (a directory /proc/spl/kstat/zfs/POOL for each imported pool), or
//     zpool where /proc/spl is not shown or names no such pool.
//   - zfs list names any number of datasets: it prints a row for each it
//     can list and a line "cannot open 'NAME': REASON" on standard error
//     for each it cannot, and exits 1 if there was one. Gets made while a
//     listing runs are answered together by the next one, one zfs list
//     naming every zvol asked for (at most 64), so a burst of creates,
//     each of which asks first whether its volume exists, runs a few
//     listings instead of one per create; each answer still comes from a
//     listing that started after it was asked.
//   - Delete is one command: the channel program destroy.lua, given to
//     zfs program on standard input, checks that the dataset is a volume
//     whose OwnerProperty names the volume and destroys it, in one sync
//     task of the pool, so nothing can replace the zvol between the check
//     and the destroy. The destroy's sync task removes the zvol's device
//     node as zfs destroy does. An open zvol fails with EBUSY, which
//     Delete retries for a few seconds (a new or resized zvol is held open
//     briefly by the kernel). zfs program cannot open a pool that is not
//     imported, so Delete never succeeds against one.
//   - Snapshots (Snapshotter) are zfs snapshots, POOL/PARENT/SOURCE@ID,
//     owned through SnapshotProperty; restores and clones are linked
//     clones (zfs clone), made in a moment and sharing every block they
//     do not overwrite. A clone of a volume is a clone of a snapshot
//     taken for it alone (CloneProperty), marked for deferred destruction
//     at once so that ZFS destroys it with the clone. ZFS refuses to
//     destroy a zvol with snapshots and a snapshot with clones, yet every
//     delete must succeed at once: destroy.lua marks a zvol that still
//     has snapshots deleted (OwnerProperty "deleted:ID", which List, Get
//     and the owner checks treat as gone) and destroys a snapshot with
//     clones deferred (zfs destroy -d; ZFS destroys it with its last
//     clone). After each destroy it reaps up the chain of origins: a zvol
//     marked deleted that nothing needs any more is destroyed, and its
//     space comes back then. A snapshot an operator took of a volume by
//     hand keeps the deleted zvol too; a Delete after the operator
//     destroyed it reaps it.
//   - zfs clone refuses volblocksize (a clone has its origin's), so a
//     clone gets the store's other properties; a thick store's clone
//     gets refreservation=auto, its volsize.
//   - A sparse create or expansion is admitted against a zfs list of every
//     dataset of the pool at most AdmissionMaxAge old, less what the
//     backend admitted since; such a listing costs about as much as the
//     zfs create it admits. (The LVM backend admits a thin create only
//     on a listing begun after the create was asked for: its listing
//     also says whether the pool zeroes new chunks, which must never be
//     older than the request.)
package zfs
