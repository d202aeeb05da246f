// Package cluster turns the kernel lab's guest into a one-node Kubernetes
// cluster, or two guests into a two-node one (see "Two kernels" below),
// for the end-to-end suites that must see pillar-csi the way users do:
// installed with Helm, driven through PVCs and pods.
//
// Everything runs inside the guest, on addresses that exist only there:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
// kubelet and kube-proxy (all from bin/, built by make cluster-tools from
// the tools module's pinned k8s.io/kubernetes), containerd, runc and the
// CNI plugins from Debian (installed on the host by the lab's provisioning;
// the guest runs the host's userland over 9p). The chart's images come
// through a private registry, as on a user's cluster: a one-guest cluster
// runs the CNCF distribution registry (bin/registry) over HTTPS on the
// node's address, containerd trusts it through a hosts.toml that names
// the cluster's CA, and the install pushes the images there (make push)
// for the kubelet to pull; only the sandbox image is imported with `ctr
// -n k8s.io images import` (see registry.go). A two-guest run, and a run
// with -cluster.import (Options.ImportImages), import every image from
// bin/images/*.tar (make images) instead, and the chart runs them with imagePullPolicy: Never; so do
// the harness's own busybox and agnhost images in every run.
//
// # The control plane on the host
//
// With `pillar-lab test -cluster-control-plane` (make e2e-ci does this)
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler run
// natively on the host instead (StartHostControlPlane, hostcp.go), and the
// guest keeps only the node: containerd, the kubelet, kube-proxy and the
// pods. Emulated, the control plane took most of the guest's two vCPUs
// (488 of the 673 s of CPU of one cluster start beside the kernel lab),
// so the pods under test starved and their liveness probes failed. The
// guest's harness finds the host's plane through ControlPlaneEnv: it
// issues its node's credentials with that plane's CA, masquerades what
// leaves through eth0 (the host's network, BootOptions.HostNet), and
// serves the CONNECT proxy (TLS, clients of the cluster's CA only) that the
// API server's egress selector uses for logs, exec and port-forward; QEMU
// forwards a port of the host's loopback to it. A two-guest run keeps the
// control plane in the main guest: its guests have no host network.
//
// # What the guest needs that the plain lab does not give
//
// Start prepares the guest the way systemd and a distribution's packaging
// prepare a real node, because without each step something specific breaks:
//
//   - `mount --make-rshared /`: Bidirectional mount propagation, which every
//     CSI node plugin needs, fails on a private root.
//   - the whole module tree of the guest kernel (Lab.ModuleTree, named on
//     the kernel command line) bind-mounted over /lib/modules/$(uname -r):
//     the lab's boot set has no nf_tables, and kube-proxy then fails with
//     "Protocol not supported". The kernel's own module requests find the
//     tree because the lab's init makes the overlay the root (as
//     switch_root does); that also makes `kubectl exec` (runc exec, setns)
//     land in the container rather than in the initramfs.
//   - cgroup2 at /sys/fs/cgroup with every controller delegated: the kubelet
//     (cgroupDriver cgroupfs) creates the kubepods hierarchy under the root.
//   - a node address on a dummy interface with an on-link default route
//     (the guest has only lo), and the node name in /etc/hosts.
//   - tmpfs for containerd's and the kubelet's state and for etcd's data:
//     overlayfs snapshots cannot use the guest's overlay root as upper layer.
//   - an NVMe host identity of the node's own in /etc/nvme (hostnqn and
//     hostid, derived from the node name, so the same on every boot): the
//     guests run the host's userland, whose /etc/nvme/hostnqn (written by
//     the host's nvme-cli) would otherwise be every node's, and the storage
//     node's access lists could not tell the nodes apart.
//
// # Two kernels
//
// In a two-guest run (pillar-lab test -peer-m, make e2e-two) the cluster
// spans two guests: Start, in the main guest, runs the control plane and
// the first node; Join, in the peer guest, makes it a second node. The
// guests are joined by a QEMU dgram link (eth0, addresses in
// guest.LinkCIDR that exist only inside the guests) and share one
// uncached 9p directory, through which the main guest hands the peer its
// kubelet's and kube-proxy's credentials and the peer reports a failed
// join; the host cuts the peer's power on request through it too
// (guest.CutPeerPower). Each node has its own pod subnet, routed through
// the other's link address. What the peer needs beyond a one-guest node:
//
//   - virtio_net and virtio_blk from the whole module tree: the guest has
//     no udev to load them when the NIC and the disks appear.
//   - no udev also means no partition links: zpool create on a whole disk
//     partitions it and then fails ("failed to detect device partitions on
//     /dev/vda1"), so the storage suite puts its pool on a loop device over
//     the disk, which ZFS takes as it is and which maps the disk one to one.
//   - its state on a disk of its own: the guest's root is a tmpfs overlay,
//     which a power cut empties.
//
// Measured on an idle 2-core host, main guest 2 vCPUs and 3 GiB, peer 1
// vCPU and 1.5 GiB: both nodes Ready 220–232 s after the main guest's
// start (about 150 s for a one-guest cluster of 2 vCPUs); after the peer's
// power cut its node was Ready again 82–114 s into its new boot.
//
// # Figures (2 vCPU TCG guest, 2 GiB)
//
// API server ready ~25 s of guest uptime, node Ready ~35 s, a pod Running
// ~6 s after it is created; the control plane uses ~700 MiB. See the
// package's smoke test for the measured timeline of a run.
package cluster
