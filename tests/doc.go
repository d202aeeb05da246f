// Package tests holds pillar-csi's end-to-end suites and test tooling: the
// real-kernel lab (a Debian kernel under QEMU running nvmet, nvme-tcp, LVM
// and ZFS), the suites that need a real kube-apiserver and etcd, and
// benchmark commands.
//
// The module is never released. It may depend on every other pillar-csi
// module and on any test library; the build tools it pins live in the
// separate tools module under tools/.
package tests
