// Package deploy puts pillar-csi into a lab cluster (tests/e2e/cluster) the
// way the README tells a user to: the storage node labelled, the chart of
// deploy/charts installed with `helm install --wait` and the images make
// images built, the CRD YAML of deploy/examples applied, every Pillar*
// object waited for until Ready. It also makes the storage node's pools (a
// zpool and a volume group with a thin pool on loop devices, the names the
// examples use) and writes what explains a failure.
//
// The end-to-end suite (tests/e2e/pillar) and make demo (tests/demo) both
// install through it, so the demo a newcomer runs is the install the suite
// proves.
package deploy
