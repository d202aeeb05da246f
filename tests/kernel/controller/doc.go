// Package controller is the real-kernel suite of pillar-controller and
// pillar-agent together: the shipped binaries, built by `make test-kernel`
// into bin/, run inside the kernel lab's Debian 6.1 guest against a real
// kube-apiserver and etcd (envtest, started in the guest from bin/) and
// real ZFS and LVM storage.
//
// pillar-controller runs as the user its generated RBAC is for
// (csidriver/config/rbac: the ClusterRole, and the Role in pillar-csi,
// bound to that user alone), leader-elected on its Lease; pillar-agent
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
//     Ready is no plaintext fallback.
//
// The guest runs Go about 25 times slower than the host, so every wait
// allows minutes; a failure logs the controller's and agents' logs, and the
// objects and events as the API server has them.
package controller
