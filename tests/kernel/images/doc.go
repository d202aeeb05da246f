// Package images is the real-kernel suite of the container images `make
// images` builds: each image's root filesystem, unpacked under
// bin/images/<name>.rootfs, runs in the kernel lab's guest the way its pod
// runs it — chrooted, with the host paths the Helm chart mounts
// bind-mounted in — so a missing library, tool or mount fails here and not
// on a user's node. What the suite proves:
//
//   - every image's binary runs from its own root filesystem (-version);
//   - the init containers' commands work against the guest kernel's
//     modules: `modprobe -a nvmet nvmet_tcp` in pillar-agent's image and
//     `modprobe -a nvme_tcp nvme_fabrics` in pillar-node's (loaded already,
//     which is not an error);
//   - pillar-agent's image, which carries no ZFS and no LVM, drives the
//     guest's own zfs and lvm through -host-root=/host (the host's "/"
//     mounted there): it reports ready, creates, exports, expands and
//     deletes a volume on a ZFS pool and on an LVM thin pool, with the
//     chart's -lvm-reject defaults;
//   - pillar-node's image stages a volume that agent exports (nvme
//     connect, mkfs.ext4, mount), and unstages it, with its own mount,
//     blkid, mkfs and nvme tools.
//
// Run with `make images test-kernel`, or `bin/pillar-lab test
// tests/kernel/images` once the images exist; a missing image fails the
// suite.
package images
