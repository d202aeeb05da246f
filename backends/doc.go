// Package backends defines the volume backend interface of pillar-csi and
// its implementations: ZFS zvols (thick or sparse) and LVM logical volumes
// (linear or thin) on a storage node.
//
// Every external command (zfs, zpool, lvm) runs through one context-aware
// runner with a timeout, LC_ALL=C, machine-readable output, stderr kept in
// the error and the whole process group killed on cancel.
//
// Allowed dependencies: the Go standard library and golang.org/x/sys. No
// Kubernetes and no gRPC: callers map backend errors to their own protocol.
package backends
