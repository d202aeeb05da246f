// Package node is the CSI Node service of pillar-csi, run by pillar-node on
// every worker. It attaches volumes exported by pillar-agent over
// NVMe-oF/TCP with the kernel's own initiator (no nvme-cli), finds each
// volume's block device by the namespace UUID/NGUID that
// api/export.For derives from the volume ID, makes ext4 or xfs only on a
// blank device, mounts and bind-mounts, grows filesystems and reports
// stats and volume condition.
//
// # Contract with the controller
//
// The volume context is parsed by api/export.ParseVolumeContext (target
// address, port, subsystem NQN, transport, connect options); the fs type
// comes from the volume capability. The node ID is
// api/export.FormatNodeID(node name, host NQN), so ControllerPublish can
// put the host NQN on the subsystem's access list.
//
// # State
//
// NodeStageVolume writes a stage record (internal/stage: JSON, renameio,
// one file per volume under the state directory, /var/lib/pillar-csi/node)
// before it connects, and completes it after mounting. NodeUnstageVolume
// receives neither capability nor context and works from that record; so
// do publish, expand and stats. A record that cannot be read is a
// FailedPrecondition naming the file, never skipped.
//
// # Host identity
//
// The host NQN and host ID come from /etc/nvme/hostnqn and
// /etc/nvme/hostid (ReadHostIdentity), the files nvme-cli and the
// distribution's nvme packages maintain. pillar-node does not generate
// them: an identity a container invented would differ from the one other
// initiator software on the host uses, and a new NQN after every
// reinstall of the DaemonSet would break the controller's access lists.
// A missing file is a startup error telling the operator how to create it
// (nvme gen-hostnqn).
//
// # Kernel and initiator behaviour handled here
//
//   - Connecting is one write of the option string to /dev/nvme-fabrics;
//     a second connect of the same host to the same subsystem and address
//     is refused (EALREADY), so a live controller of the subsystem at that
//     address is reused (repeated stages, and a stage after a plugin
//     restart).
//   - The namespace's block device appears asynchronously after the
//     connect and its nvmeXnY name follows the subsystem instance, not the
//     controller: the device is found by /sys/block/nvme*n*/uuid (or
//     nguid), waiting at most NamespaceTimeout.
//   - The connect options reach the controller as written, except
//     ctrl_loss_tmo: the kernel keeps max_reconnects =
//     ceil(ctrl_loss_tmo / reconnect_delay), so the controller gives up
//     after up to one reconnect_delay more than asked (its sysfs
//     ctrl_loss_tmo reads 18 for 17 s with a 3 s delay).
//   - delete_controller of the controllers whose subsysnqn is the
//     volume's disconnects only that volume; Disconnect then waits until
//     the controllers are gone from /sys/class/nvme.
//   - When the target goes away, controllers enter "connecting" and the
//     block device stays until ctrl_loss_tmo expires; I/O to it blocks
//     until then. NodeGetVolumeHealth reports it INACCESSIBLE as soon as no
//     controller is live, and unstage still deletes the controller (a
//     delete during reconnect is allowed). A short ctrlLossTimeoutSeconds
//     bounds how long an unmount can wait on dirty data.
//   - A grown namespace reaches the initiator through an asynchronous
//     event, and only after the target re-reads its backing device (nvmet
//     does so on a write to the namespace's revalidate_size, which
//     pillar-agent owes after growing a volume); rescan_controller forces
//     the initiator's re-read, and the size is awaited before the
//     filesystem grows. xfs_growfs needs the mount point,
//     resize2fs the device.
//   - A filesystem in kernel shutdown (xfs after an I/O error) or on a
//     vanished device answers stat with EIO; mount probes that fail with
//     EIO, ENOTCONN, ESTALE or EACCES count as still mounted so that
//     unpublish and unstage unmount instead of skipping.
//   - blkid -p exits 2 when a device carries no signature; only then is a
//     filesystem made. A device with another filesystem or a partition
//     table is refused (FailedPrecondition), never reformatted.
//   - mkfs.xfs refuses devices under 300 MB.
//   - /proc/mounts shows a bind mount of a device node with the source
//     "devtmpfs"; /proc/self/mountinfo's root field names the node.
//   - Mounts and unmounts are mount(2) and umount2(2), not mount(8):
//     the options mount(8) would turn into flags (ro, nosuid, noatime,
//     bind, ...) become MS_* flags and every other one goes to the
//     filesystem as its data string, as mount(8) passes it; mount(8)'s
//     own options (nofail, user, x-*) are refused. k8s.io/mount-utils is
//     kept for reading the mount table (IsMountPoint's mountinfo
//     fallbacks, the corrupted-mount errors).
//   - A bind remount (MS_REMOUNT|MS_BIND|MS_RDONLY) sets the mount's flags to
//     exactly those given: the nosuid, nodev and noexec a publication
//     inherited from the staging mount are repeated from statfs, or the
//     read-only publication would lose them.
//   - A read-only bind mount of a device node does not make the device
//     read-only: may_open ignores MNT_READONLY for block and character
//     devices, so O_RDWR still succeeds. Reader-only block volumes get
//     BLKROSET instead; writes then fail with EPERM.
package node
