// Package node is the kernel lab's suite for pillar-node, the CSI Node
// service (csidriver/node): it exports LVM volumes with the configfs
// module on 127.0.0.1, exactly as pillar-agent does (identifiers from
// api/export.For), and drives the node service in-process through its
// gRPC API over a real unix socket with the CSI client, against the real
// kernel initiator, mkfs, mount and sysfs.
//
// It covers: ext4 and xfs stage with mount flags, publish read-write and
// read-only (a write through the read-only publication fails with EROFS,
// and both keep the staging mount's nosuid, nodev and noexec), block
// volumes, data written, unstaged (controller gone from /sys/class/nvme),
// restaged and read back, online expansion, unstage by a new service
// instance from the stage record, stats, unstage after the target went
// away, and a filesystem in kernel shutdown under a publication.
//
// The tests carry the build tag "kernel" and run only in the lab:
//
//	cd tests && go run ./cmd/pillar-lab test tests/kernel/node
//
// The benchmark compares NodeStage+NodePublish with the raw sequence
// (connect through /dev/nvme-fabrics, wait for the namespace, mkfs.ext4,
// mount, bind mount) and reports pillar-node's resident memory; the
// service runs in a child process (the test binary re-executed), so its
// RSS is its own:
//
//	cd tests && go run ./cmd/pillar-lab test tests/kernel/node -- -test.run '^$' -test.bench . -test.benchtime 5x
//
// Kernel behaviour this suite relies on is listed in csidriver/node's
// package documentation.
package node
