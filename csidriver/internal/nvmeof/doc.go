// Package nvmeof drives the Linux NVMe over Fabrics initiator through its
// kernel interfaces only — /dev/nvme-fabrics to connect, sysfs
// (/sys/class/nvme, /sys/block) to find controllers and namespaces, and
// the controllers' delete_controller and rescan_controller attributes — so
// pillar-node needs no nvme-cli.
//
// An Initiator has a settable root for sysfs and /dev, so unit tests run
// against a fixture tree; the kernel behaviour it relies on is proven by
// tests/kernel/node in the kernel lab:
//
//   - A write of "transport=tcp,traddr=…,trsvcid=…,nqn=…,hostnqn=…,…" to
//     /dev/nvme-fabrics connects synchronously; a read of the same open
//     file answers "instance=N,cntlid=M", and the controller is
//     /sys/class/nvme/nvmeN. A second connect of the same host NQN to the
//     same subsystem and address fails with EALREADY (unless
//     duplicate_connect), so Connect reuses a live controller first.
//   - The namespace's block device appears after the connect returns (the
//     scan is asynchronous) and is named after the subsystem instance, not
//     the controller: the device is found by its uuid/nguid attributes in
//     /sys/block, never by name or order. With native multipath the head
//     node nvmeSnM is the device; per-path nodes nvmeScCnM have no /dev
//     node and are skipped.
//   - uuid falls back to printing the NGUID when a namespace has no UUID,
//     so a match on either identifier is accepted.
//   - A write to delete_controller returns after the controller is torn
//     down; the sysfs directory may linger briefly, so Disconnect waits
//     (bounded) until no controller of the subsystem is left.
package nvmeof
