// Package cluster turns the kernel lab's guest into a one-node Kubernetes
// cluster, for the end-to-end suites that must see pillar-csi the way users
// do: installed with Helm, driven through PVCs and pods.
//
// Everything runs inside the guest, on addresses that exist only there:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
// kubelet and kube-proxy (all from bin/, built by make cluster-tools from
// the tools module's pinned k8s.io/kubernetes), containerd, runc and the
// CNI plugins from Debian (installed on the host by the lab's provisioning;
// the guest runs the host's userland over 9p). Images come from
// bin/images/*.tar (make images) and are imported with
// `ctr -n k8s.io images import`; there is no registry, so pods use
// imagePullPolicy: Never.
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
//
// # Figures (2 vCPU TCG guest, 2 GiB)
//
// API server ready ~25 s of guest uptime, node Ready ~35 s, a pod Running
// ~6 s after it is created; the control plane uses ~700 MiB. See the
// package's smoke test for the measured timeline of a run.
package cluster
