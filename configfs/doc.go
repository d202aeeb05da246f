// Package configfs is a typed client for the Linux NVMe target (nvmet)
// configfs tree, normally mounted at /sys/kernel/config.
//
// It reads subsystems, namespaces, ports, hosts and their links into Go
// values, and applies or removes one export declaratively while obeying the
// kernel's ordering and mutability rules. It replaces nvmetcli and targetcli
// for pillar-csi and is meant to be imported by unrelated nvmet tools.
//
// Allowed dependencies: the Go standard library and golang.org/x/sys only
// (test-only dependencies such as go-cmp are fine). No Kubernetes, no other
// pillar-csi module.
package configfs
