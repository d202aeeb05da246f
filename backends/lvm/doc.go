// Package lvm is the LVM backend: every volume is a logical volume in one
// volume group, linear (allocated from the group) or thin (in a thin pool).
// All commands go through the lvm binary with JSON reports
// (--reportformat json --units b --nosuffix).
//
// Naming and ownership: a volume's LV is named after its ID when LVM
// accepts that name (see LVName), and carries the tag TagPrefix+ID, which
// is what makes it ours; List reports only tagged LVs. Volume IDs use
// only characters that LVM allows in tags on every release ([a-z0-9.-]), so
// the ID is the tag's suffix as it is.
//
// Behaviour of LVM 2.03 that this package relies on, each proven in the
// kernel lab (tests/kernel/backends) and replayed from captured output in
// the unit tests:
//
//   - Without udev, LVM must be told not to wait for udev and to create
//     its /dev/mapper nodes itself: every command gets --config with
//     Config (activation udev_sync=0 udev_rules=0, device list not from
//     udev). With udev sync on, lvcreate waits for events that never come
//     and fails with "device not cleared".
//   - The device node is /dev/mapper/VG-LV (hyphens doubled), made by
//     libdevmapper when udev_rules=0; LVM reports it as lv_dm_path. It is
//     gone while the LV is inactive (for example after a reboot with
//     activation skipped), and a node removed by someone else is made
//     again by lvm vgmknodes. DevicePath handles both.
//   - Sizes in bytes must be multiples of 512 ("Size is not a multiple of
//     512", exit status 3); LV sizes, thin ones included, are rounded up to
//     the extent size. The backend rounds to the extent size itself and so
//     knows and reports the size.
//   - lvcreate refuses names starting with "snapshot" or "pvmove", and any
//     LV whose device-mapper name ("VG-LV" with every '-' doubled) exceeds
//     127 bytes; LVName falls back to a hashed name for those IDs.
//   - lvcreate of a thin LV larger than its pool only warns (overcommit):
//     the backend's admission rule (package backends) is what limits it.
//   - lvextend to the current size fails ("matches existing size", exit 5)
//     and refuses to shrink ("not larger than existing size"); the backend
//     compares sizes first.
//   - lvremove of an open LV fails with "in use" (exit 5): ErrBusy.
//   - Delete is one lvremove that selects the LV by name and by the
//     volume's tag (--select 'lv_name="N" && lv_tags={"T"}') under the volume
//     group's lock, and says "successfully removed" for it. Nothing
//     selected is not an error; Delete then lists the LV to tell a volume
//     already gone (success) from an LV that is not ours (ErrConflict).
//   - A missing VG ("Volume group "x" not found") and a missing LV
//     ("Failed to find logical volume") are told apart by the message;
//     both exit with status 5, which LVM uses for most failures.
//   - --yes answers every prompt and --wipesignatures y wipes any old
//     signature on a new linear LV without asking; a thin LV's unwritten
//     blocks read as zeroes, so it has nothing to wipe.
//   - A thin pool created with --zero n, or changed with lvchange
//     --zero n, does not zero a chunk when it provisions it: a write
//     smaller than the chunk leaves the rest of the chunk as a deleted
//     thin LV left it, readable through the new LV. lv_attr's eighth
//     character says whether the pool zeroes ('z') or not ('-'); Create
//     and Capacity refuse such a pool (backends.ErrThinPoolNotZeroing)
//     unless Config.AllowUnzeroedThinPool is set, at no extra command:
//     the pool's row is in the lvs report they run anyway. A thin Create
//     is decided on a report begun after it was asked for, its own or
//     one another Create began meanwhile (the creates of a burst share
//     it), never on an older one. lvchange
//     --zero y takes effect on an active pool with LVs in use.
//   - A linear LV gets freed extents as a deleted LV left them: lvcreate
//     --zero y clears only the first 4 KiB, and lvextend adds extents
//     untouched, so a new LV reads a deleted tenant's data: in the lab
//     (LVM 2.03.16, Linux 6.1) a new 92 MiB LV made with --zero y read
//     the deleted LV's pattern in 96464896 of its 96468992 bytes, all
//     but the first 4 KiB (tests/kernel/backends, TestLVMLinearNoLeak).
//     So Create
//     overwrites a new linear LV, and Expand the range it adds, with
//     zeroes (blkdiscard --zeroout, a GiB at a time), before the volume
//     or its growth is reported. The LV carries a tag meanwhile,
//     pillar-csi.io_zero-from_<offset>, moved forward after each GiB and
//     removed at the end; a Create or Expand cut short (a crash, a
//     deadline) leaves it, and the retry finishes the zeroing before it
//     returns. Zeroing costs what the disk takes to write zeroes, or
//     almost nothing on one with a write-zeroes command (NVMe, most SSDs
//     behind device-mapper).
//
// Snapshots (Snapshotter) need a thin pool; a linear store refuses them
// with backends.ErrUnsupported (old-style snapshots of a fixed size stop
// working when they fill up). A snapshot is a thin snapshot
// (lvcreate --snapshot, activation skipped) tagged with SnapshotTagPrefix
// and SourceTagPrefix; a restore or clone is a thin snapshot of the
// snapshot or of the volume, activated and tagged as a volume. Thin
// snapshots share blocks but depend on nothing: the source, its snapshots
// and the volumes made from them are removed in any order, and each
// removal frees what only it used. LVM copies the origin's tags to a
// snapshot; the backend removes the copies, and a tag that does not name
// its LV (ownerByName) never makes an LV ours.
package lvm
