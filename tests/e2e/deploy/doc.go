// Package deploy puts pillar-csi into a lab cluster (tests/e2e/cluster) the
// way the README tells a user to: it runs the shell blocks of the README's
// Quickstart as written (the storage node labelled, the chart of
// deploy/charts installed with `helm install --wait`, the CRD YAML of
// deploy/examples applied, every Pillar* object waited for until Ready),
// with only the lab's node name and the images make images built filled
// in. ShellBlocks reads the commands of a documented procedure (the
// quickstart, docs/troubleshooting.md's recovery) for the suite to run. It also makes the storage node's pools (a
// zpool and a volume group with a thin pool on loop devices, the names the
// examples use) and writes what explains a failure.
//
// The end-to-end suite (tests/e2e/pillar) and make demo (tests/demo) both
// install through it, so the demo a newcomer runs is the install the suite
// proves.
package deploy
