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
// The tests carry the kernel build tag and run with
//
//	bin/pillar-lab test -m 3072 -timeout 60m tests/e2e/pillar -- -test.timeout 45m
//
// (or make e2e). TestMain boots the cluster and the storage (a zpool named
// tank and a volume group vg0 with the thin pool thin0, on loop devices,
// the names deploy/examples uses) once; the first test that needs the
// driver installs the chart and applies the examples, and every test
// works in a namespace of its own.
package pillar
