// Package smoke is the kernel lab's smoke suite: it proves, on a real
// Debian kernel, the whole data path pillar-csi depends on, without any
// pillar-csi code in between.
//
// For each of an LVM linear LV, an LVM thin LV, a ZFS thick zvol and a ZFS
// sparse zvol, and for each of ext4 and xfs, it exports the volume as an
// NVMe-oF/TCP namespace on 127.0.0.1 by plain writes to the nvmet configfs
// tree, connects the kernel's own initiator through /dev/nvme-fabrics,
// finds the namespace's block device by the UUID it exported (never by
// nvmeXnY order), makes the filesystem, mounts it, writes a file and its
// SHA-256, unmounts, disconnects, removes the export, and finally mounts the
// volume on the target side and checks the file.
//
// The tests carry the build tag "kernel" and run only in the lab:
//
//	make test-kernel                       # everything
//	cd tests && go run ./cmd/pillar-lab test tests/kernel/smoke
//
// Facts the suite relies on (verified by it on 6.1):
//
//   - mkfs.xfs refuses devices under 300 MB, so every volume is 320 MiB.
//   - nvmet's device_uuid and device_nguid may only be written while the
//     namespace is disabled; a port's addr_* attributes only while no
//     subsystem is linked to it. Teardown is the reverse of setup: unlink
//     the subsystem from the port, remove the port, disable and remove the
//     namespace, remove the subsystem; rmdir of a subsystem that still has
//     a namespace or a port link fails with EBUSY/ENOTEMPTY.
//   - nvmet enables the listener when the first subsystem link appears
//     under ports/N/subsystems, not when addr_* is written.
//   - Writing "transport=tcp,traddr=…,trsvcid=…,nqn=…" to /dev/nvme-fabrics
//     connects synchronously and answers "instance=N,cntlid=M" on a read
//     of the same open file; the namespace's block device appears shortly
//     after (asynchronous scan), named by the subsystem instance, which need
//     not be N. With native multipath (Debian's default) the block device
//     is the head node nvmeSnM; its sysfs "uuid" and "nguid" are what the
//     target set. The per-path nodes (nvmeScCnM) are listed in /sys/block
//     with the same uuid but have no /dev node: match only nvmeSnM.
//   - The target's view of a volume that the initiator wrote through nvmet
//     may be stale in the target's page cache; flush it (BLKFLSBUF) before
//     reading the volume back.
package smoke
