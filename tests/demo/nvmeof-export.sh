#!/bin/sh
# The pillar-csi data path, end to end, on a real kernel: a ZFS zvol on a
# storage node is exported over NVMe/TCP by writing nvmet configfs (through
# the configfs module's nvmet-export tool), a worker connects with the
# kernel's NVMe/TCP initiator, formats and writes the volume, and the data is
# read back on the storage side. Target and initiator share the lab guest's
# kernel over 127.0.0.1, as the kernel's own NVMe-oF tests do.
#
# Run it with `make demo` (it needs the kernel lab: root, and the lab's
# packages, which `make demo` provisions on first use).
set -eu

bin=${PILLAR_BIN:?PILLAR_BIN must name the directory holding nvmet-export}
nqn=nqn.2026-01.io.pillar-csi:volume:demo-vol
hostnqn=nqn.2014-08.org.nvmexpress:uuid:6c0e6a3e-8a42-4a3f-9d55-1f0c8e1f2b7a
work=/var/tmp/pillar-demo

step() { printf '\n== %s\n' "$*"; }

cleanup() {
	set +e
	umount "$work/mnt" 2>/dev/null
	nvme disconnect -n "$nqn" >/dev/null 2>&1
	"$bin/nvmet-export" remove -nqn "$nqn" >/dev/null 2>&1
	zpool destroy demo 2>/dev/null
	[ -n "${loop:-}" ] && losetup -d "$loop"
}
trap cleanup EXIT

step "storage node: a ZFS pool on a loop device and a 512 MiB sparse zvol"
mkdir -p "$work/mnt"
truncate -s 1G "$work/pool.img"
loop=$(losetup -f --show "$work/pool.img")
zpool create -f demo "$loop"
zfs create -s -V 512M -o volblocksize=16k demo/vol
zfs list -t volume -o name,volsize,used,refreservation demo/vol
# There is no udev in the guest: no /dev/zvol/ link, only /dev/zdN. The only
# zvol of a freshly booted guest is zd0.
zvol=/dev/zd0
[ -b "$zvol" ] || { echo "no $zvol" >&2; exit 1; }

step "storage node: export it over NVMe/TCP on 127.0.0.1:4420, for one host only"
"$bin/nvmet-export" apply -nqn "$nqn" -device "$zvol" -addr 127.0.0.1 -port 4420 -host "$hostnqn"
"$bin/nvmet-export" show

step "worker: connect with the kernel NVMe/TCP initiator"
nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$nqn" -q "$hostnqn"
dev=
for i in $(seq 50); do
	# With native multipath the block device is the subsystem's head node
	# (nvmeXnY); the per-controller path nodes (nvmeXcYnZ) have no /dev entry.
	for s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
		for ns in "$s"/nvme*n*; do
			case ${ns##*/} in *c*) ;; *) [ -e "$ns" ] && dev=/dev/${ns##*/} ;; esac
		done
	done
	[ -n "$dev" ] && [ -b "$dev" ] && break
	sleep 0.2
done
[ -n "$dev" ] || { echo "namespace of $nqn did not appear" >&2; exit 1; }
echo "$nqn is $dev ($(blockdev --getsize64 "$dev") bytes)"

step "worker: mkfs.ext4, mount, write 8 MiB, checksum"
mkfs.ext4 -q "$dev"
mount "$dev" "$work/mnt"
head -c 8388608 /dev/urandom >"$work/mnt/data"
sum=$(sha256sum <"$work/mnt/data")
umount "$work/mnt"
echo "wrote data: sha256 ${sum%% *}"

step "worker: disconnect"
nvme disconnect -n "$nqn"

step "storage node: remove the export; read the data back from the zvol itself"
"$bin/nvmet-export" remove -nqn "$nqn"
mount -o ro "$zvol" "$work/mnt"
back=$(sha256sum <"$work/mnt/data")
umount "$work/mnt"
echo "read back: sha256 ${back%% *}"
[ "$sum" = "$back" ] || { echo "checksum mismatch" >&2; exit 1; }
zfs list -t volume -o name,volsize,used demo/vol

step "done: the data written over NVMe/TCP is on the zvol"
