// Package agent is the real-kernel suite of pillar-agent's gRPC service
// (agent/server): the service on the kernel lab's Debian 6.1 guest,
// driving real ZFS zvols and LVM logical volumes and the real nvmet
// configfs tree, called through the generated gRPC client.
//
// What it proves, for LVM and ZFS:
//
//   - create → export → the kernel's own NVMe/TCP initiator connects, the
//     namespace is found by the UUID api/export derives → data written
//     through the initiator is read back on the target → the volume grows
//     while connected and the initiator sees the new size → disconnect →
//     unexport → delete, leaving no subsystem, port or volume behind;
//   - a volume whose export was left with its namespace disabled grows
//     without error (nvmet refuses revalidate_size there, which the test
//     shows), and the retried export serves the new size;
//   - every mutating call with a stale generation is refused with
//     FAILED_PRECONDITION and a FencingRejection, and neither configfs
//     (compared with configfs Read) nor the store (backend List) changes;
//   - the agent, running as a separate process, is SIGKILLed while an
//     export is half-written in configfs; a restarted agent accepts the
//     retried call, converges the export, and the fencing marks survived;
//   - the agent process is SIGKILLed while its lvcreate waits for the
//     volume group's lock (the test holds it shared, as a concurrent lvs
//     would); the lvcreate dies with the agent, and a new agent's retried
//     CreateVolume succeeds and leaves exactly one logical volume;
//   - every Volume that CreateVolume, ExpandVolume and ListVolumes return
//     names the device the backend opens, and an agent restarted on the
//     same marks counts the volumes that exist;
//   - configfs is wiped as a storage-node reboot does; a restarted agent's
//     Reconcile restores every export (the access list included), leaves a
//     subsystem it does not own alone, and the initiator reconnects and
//     reads back what it wrote before.
//   - on LVM thin and ZFS, a restore reads the snapshot's bytes over the
//     whole device (also through the initiator) and a clone its source's
//     current bytes; a stale or foreign token of a snapshot call is refused
//     and changes nothing on the store; source, snapshot and restores are
//     deleted in any order and leave nothing behind; an agent SIGKILLed
//     before or after the backend command of CreateSnapshot or of a
//     restore converges on the identical retry; linear LVM refuses
//     snapshots, naming its type.
//
// Run it with
//
//	cd tests && go run ./cmd/pillar-lab test tests/kernel/agent
//
// The benchmarks (create+export latency against the raw backend and
// configfs calls, concurrent create+export, reconcile after a wipe, agent
// RSS) run with
//
//	go run ./cmd/pillar-lab test tests/kernel/agent -- -test.run '^$' -test.bench . -test.benchtime 1x
//
// and are sized by the flags -agent.latency (volumes timed one by one per
// store, default 16), -agent.concurrent (default 128) and -agent.volumes
// (exports reconciled and held for the RSS figure, default 256).
package agent
