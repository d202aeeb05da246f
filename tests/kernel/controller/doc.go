// Package controller is the real-kernel suite of pillar-controller and
// pillar-agent together: the shipped binaries, built by `make test-kernel`
// into bin/, run inside the kernel lab's Debian 6.1 guest against a real
// kube-apiserver and etcd and real ZFS and LVM storage. The API server
// and etcd run natively on the host (`pillar-lab test -apiserver`, from
// bin/, with the CRDs of api/config/crd), and the guest reaches them
// through QEMU's user-mode network: emulated in the guest they took a
// minute to start and much of its CPU.
//
// pillar-controller runs as the user its generated RBAC is for
// (csidriver/config/rbac: the ClusterRole, and the Role in pillar-csi,
// bound to that user alone; its kubeconfig impersonates that user, so
// the API server authorizes each request as that user),
// leader-elected on its Lease; pillar-agent
// listens on 127.0.0.1. What the suite proves:
//
//   - a PillarAgent becomes Ready (AgentReady) and its status carries the
//     version, instance ID and boot ID the agent binary itself reports; the
//     boot ID is the guest kernel's;
//   - a ZFS PillarStore's status.capacity equals what `zfs get -Hp
//     used,available` says of its parent dataset, and an LVM thin
//     PillarStore's what `lvs` says of its thin pool less the virtual size
//     of the thin LVs already in it (the agent's overcommit rule at ratio
//     1);
//   - SIGKILL of the agent turns the PillarAgent not Ready (Unreachable);
//     the restarted agent is Ready again with a new instance ID, the same
//     boot ID, and an AgentRestarted event about the PillarAgent;
//   - with mutual TLS on the agent (a CA, a server certificate for
//     127.0.0.1 and a client certificate made by the test), a PillarAgent
//     whose Secret does not exist yet is not Ready (TLSSecretMissing), and
//     is Ready once the Secret with ca.crt, tls.crt and tls.key is created,
//     and an LVM linear store behind it has the capacity `vgs` reports for
//     its volume group; the same agent refuses a plaintext client, so
//     Ready is no plaintext fallback;
//   - through the controller's CSI socket (-csi-endpoint) and two
//     bin/pillar-node processes (workers A and B, each with its own host
//     NQN, state directory and socket, sharing the guest's initiator), for
//     a ZFS store and an LVM thin store, with the parameters of the
//     StorageClass a PillarStorageClass generated: CreateVolume,
//     ControllerPublish to A (A's host NQN alone in allowed_hosts), stage,
//     publish, data written through ext4, ControllerExpand + NodeExpand
//     growing the mounted filesystem, an RWO ControllerPublish to B
//     refused (FailedPrecondition naming A), the move to B with the data
//     intact, and DeleteVolume leaving no zvol or LV, no subsystem and no
//     PillarVolumeState;
//   - a storage-node reboot (the agent SIGKILLed, the volume's nvmet
//     objects removed from configfs, the agent started again on the same
//     fencing directory) heals with nobody acting: the controller pushes
//     the desired export back (same serial, UUID, NGUID; A's host NQN
//     allowed; an ExportsPushed event), A's initiator reconnects by itself
//     and the data reads back through the mounted filesystem with the page
//     cache dropped; the test logs how long the export and the "live"
//     controller took after the restart;
//   - an agent SIGKILLed while CreateVolume is in flight (once the zvol
//     exists, and once the subsystem appears in configfs) leaves nothing a
//     retried CreateVolume of the same name cannot finish: one zvol, a
//     PillarVolumeState with backendCreated and exported, a whole export,
//     and nothing after DeleteVolume;
//   - pillar-controller itself SIGKILLed while a CSI call is in flight, at
//     moments a watch of the PillarVolumeState shows (CreateVolume once
//     the record exists, and once it records backendCreated; DeleteVolume
//     once it records the export removed): a fresh controller process
//     and a retried call converge on one zvol, a whole export and a
//     complete record, and on nothing left after DeleteVolume;
//   - csi-sanity (csi-test v5, every spec) against the controller's CSI
//     socket and a pillar-node process's, with the parameters of a
//     generated StorageClass, on a ZFS store and on an LVM thin store;
//     each skip is logged with its reason.
//
// Its benchmarks (`-test.run '^$' -test.bench .`) each measure against a
// baseline in the same run: CreateVolume + ControllerPublishVolume through
// the controller against the same agent calls made directly (with the
// API server's own latency for the controller's record writes);
// CreateSnapshot and CreateVolume from that snapshot through the
// controller against the raw `zfs snapshot` and `zfs clone` or `lvcreate
// --snapshot` with the backends' flags, on sparse ZFS and LVM thin, with
// the controller's record writes per call counted by the API server; 100
// concurrent CreateVolume calls against 100 one at a time; and the
// controller's VmRSS and VmHWM with 1,000 PillarVolumeStates against
// none.
//
// The guest runs Go about 25 times slower than the host, so every wait
// allows minutes; a failure logs the controller's, agents' and nodes'
// logs, the objects and events as the API server has them, and each
// volume's PillarVolumeState and nvmet subsystem.
package controller
