// Package kernelvm is pillar-csi's real-kernel lab: it provisions a Debian
// 6.1 kernel with nvmet, nvme-tcp, device-mapper and ZFS, boots it under
// QEMU, and runs commands and Go test binaries in it as root.
//
// Why: the machines that build and test pillar-csi run a kernel with no
// configfs, nvmet, nvme-tcp or device-mapper, which loads no modules, and
// whose /dev/kvm runs no guest. Every claim about kernel behaviour is
// therefore proven here, in a full Debian kernel under TCG emulation, on
// every CI run (make test-kernel).
//
// # Pieces
//
//   - Provision (provision.go, apt.go, zfs.go, initramfs.go): installs the
//     host packages (HostPackages), downloads and unpacks the pinned kernel
//     image (DefaultKernelABI; see there for the fallback rule), unpacks its
//     headers into the cache, builds the ZFS modules from zfs-dkms against
//     them, and writes an initramfs of busybox plus the module subset
//     (BootModules, ExtraModules). Everything is cached under
//     Config.CacheDir keyed by the versions it came from; a warm call takes
//     about a second and never runs apt.
//   - Lab.NewRun and Run.Boot (vm.go): one boot with its own directory
//     under the cache. The guest runs the host's root filesystem read-only
//     over 9p under a tmpfs overlay, so every host tool (and the test
//     binaries compiled on the host) runs in it unchanged; its only
//     writable window back is the run's out/ directory. The exit status of
//     the guest script becomes Boot's result; a hard timeout kills QEMU's
//     process group, and so does a kernel whose soft-lockup watchdog
//     reports a CPU stuck past VMConfig.LockupLimit.
//   - Workspace.KernelPackages, MatchPackages and Lab.RunTests
//     (gotest.go): find every package with test files tagged "kernel"
//     across the go.work modules, compile them on the host, run them in one
//     guest and report like go test.
//   - Two-guest runs (pair.go, TestOptions.Peer): a second guest, the
//     peer, boots beside the one that runs the tests and runs the first
//     package's test binary with pillar.role=peer; the two are joined by a
//     QEMU dgram link (UDP between two ports on 127.0.0.1: no start order,
//     and either side may reboot) and share an uncached 9p directory. The
//     peer's disks are sparse raw images that survive its power cut, which
//     the main guest asks for with guest.CutPeerPower: the host kills the
//     peer's QEMU and boots it again from the same disks.
//   - The host's API server (apiserver.go, TestOptions.HostNet,
//     `pillar-lab test -apiserver`): etcd and kube-apiserver run natively
//     on the host, and the guest reaches them at HostAddr (10.0.2.2)
//     through a NIC on QEMU's user-mode network, which forwards to the
//     host's loopback. The kubeconfig (a cluster administrator's, the
//     server named by HostAddr, its certificate checked as localhost) is
//     in $PILLAR_LAB_KUBECONFIG.
//   - Package guest: the pillar.lab=1 kernel-command-line marker and
//     RequireGuest, which every kernel-tagged test calls, and the
//     two-guest run's roles, addresses and power-cut handshake.
//   - Package fixture: loop-backed LVM volume groups (with thin pools) and
//     zpools for tests in the guest.
//
// # Facts about the guest worth knowing
//
//   - Boot to the guest's userspace takes 7–9 s under TCG on an idle
//     2-core host; CPU-bound Go code runs about 25 times slower than on
//     the host, so keep heavy computation on the host.
//   - The guest's /tmp is a fresh tmpfs that hides the host's /tmp: put
//     anything the guest must execute under the cache directory (Run.Dir).
//     Init keeps the host root reachable at /run/pillar-lab/host, and the
//     guest scripts the lab writes overlay a workspace or working
//     directory under /tmp back at its own path.
//   - Kernel messages at warning level and below stay off the console
//     (loglevel=3) so that test output is not interleaved with them; the
//     whole kernel log is saved as out/dmesg.txt of the run, which is kept
//     when a run fails.
//   - 9p with its default 8 KiB msize makes loading a binary from the host
//     crawl; the lab mounts with msize=512000 and the read-only root with
//     cache=loose.
//   - libcrc32c (needed by nvmet, xfs, dm-persistent-data) fails to load
//     with "Unknown symbol" unless crc32c_generic is loaded before it.
//   - Debian's 6.1 kernel builds nvmet, nvmet-tcp, nvme-tcp, null_blk and
//     dm-thin-pool as modules but no nvme-loop.
//   - A guest has no network unless asked: 127.0.0.1 (the NVMe/TCP
//     tests' loopback), a two-guest run's link, or HostNet's eth0
//     (10.0.2.15/24, no route beyond it). Emulated, etcd and
//     kube-apiserver took 55 s to start and much of the guest's CPU, so
//     suites that need them use the host's.
//   - The guest has no udev; see package fixture for what that means for
//     LVM and ZFS.
package kernelvm
