// Package pillar is the end-to-end suite of pillar-csi in a real, if
// small, Kubernetes cluster: the one-node cluster of tests/e2e/cluster in
// the kernel lab's guest, the chart installed with `helm install`, the
// documented CRD YAML of deploy/examples applied, and PVCs bound, written,
// read back, expanded and deleted the way a user does it.
//
// The node is storage node and worker at once: pillar-agent exports zvols
// and thin LVs through the guest kernel's nvmet over TCP on the node's
// address, and pillar-node connects the kernel initiator of the same
// kernel to them. That is how the lab proves the NVMe-oF data path.
//
// Besides the volume lifecycles, the suite restarts the storage node's
// agent with its exports wiped while a pod writes, kills the agent and the
// serving controller replica in the middle of a CreateVolume (and freezes
// that replica there, thawing it after the takeover), loses the worker
// under a writing pod and force-detaches its volume, runs csi-sanity
// against the installed driver's sockets, switches the install to mutual
// TLS with the chart's own certificates and with cert-manager's (whose
// controllers the test runs in the guest, re-issuing both certificates
// under a writing pod), and runs Kubernetes' own external-storage e2e
// suite (bin/e2e.test) with testdata/external-driver.yaml.
//
// In a two-guest run (make e2e-two) the storage node is a guest of its
// own, which the suite also uses as a second worker: its power is cut
// under a pod on the main node (TestStorageNodePowerCut), and under a pod
// on itself after an RWO volume was refused to it and moved to it
// (TestTwoWorkers). The main guest's node then becomes a second storage
// node, and the peer's power cut must leave its volumes alone
// (TestScaleOutTwoStorageNodes).
//
// The tests carry the kernel build tag and run with make e2e (all of
// them), make e2e-ci (the subset make check runs), make e2e-certmanager
// (TestCertManagerMutualTLS) or make e2e-full (the whole external-storage
// suite), which boot the lab with 3 GiB. TestMain boots the cluster and the storage (a zpool named
// tank and a volume group vg0 with the thin pool thin0, on loop devices,
// the names deploy/examples uses) once; the first test that needs the
// driver installs the chart and applies the examples, and every test
// works in a namespace of its own.
package pillar
