#!/usr/bin/env bash
# make check: everything CI runs, in phases with time budgets (hack/phases.sh),
# and a table of the phases at the end.
#
# The kernel lab's guests are emulated (TCG): while one runs, the host's
# cores are not all busy, so the host work no guest waits for runs in the
# background beside the guests, at niceness 10 (the guest's QEMU keeps the
# CPU whenever it wants it), instead of before or after them. In order:
#
#   1. the binaries, kube-apiserver, etcd and the images the kernel lab's
#      suites read, while the lab provisions in the background (Debian
#      packages, the guest kernel, ZFS built for it);
#   2. the kernel lab's suites in one guest and, as soon as the lab
#      cluster's binaries and bin/e2e.test are built, the end-to-end subset
#      in the lab cluster in another; beside them, in the background: those
#      binaries, the lint and generate tools and the oldest supported
#      kube-apiserver when its suites must run, make verify, and the
#      images' checks;
#   3. every module's tests, then the oldest Kubernetes' suites unless they
#      are proven for this tree (hack/floor.sh), on a host with nothing
#      else running, since some of them wait on real time (servers,
#      API-server watches).
#
# A phase that fails does not stop the others (as make -k), except that a
# guest is not booted when what it needs failed to build; the run fails at
# the end, naming every failed or overrun phase. Budgets are in seconds, for
# a cold run on the 2-core CI machine (docs/ci.md); a phase past OVERRUN (2)
# times its budget fails the run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/phases.sh"
trap 'rm -rf "$PHASE_DIR"' EXIT
cd "$REPO_ROOT"

m() { make --no-print-directory "$@"; }
KERNEL_CI_SKIP='^(TestSnapshotKill|TestSnapshotDeleteAnyOrder)$'

B=$REPO_ROOT/bin
floor_proven() { hack/floor.sh check >/dev/null; }

# host_work is the host's share while the guests run, in the order the
# guests need it: the lab cluster's binaries first (the end-to-end subset
# waits for them), then the tools and checks nobody waits for.
host_work() {
	run_phase build-cluster 1500 m cluster-tools "$B/e2e.test"
	run_phase build-tools 900 m verify-tools $(floor_proven || m -s print-FLOOR_APISERVER)
	# 1600 s: at niceness 10 beside the two guests it gets only the CPU
	# they leave (1573 s on the CI machine, 2026-12-05).
	run_phase verify 1600 m verify
	run_phase images-check 600 m images-check -o images
}

# 1. Budgets from a run with every cache empty (2026-12-05, docs/ci.md):
# the builds took 1829 s, and the provisioning 2336 s (it began after them,
# then ZFS took 407 s) against a budget of 1200, within a minute of twice
# it. A warm run takes seconds for both.
start_phase lab-provision 2400 m lab-provision
run_phase build-kernel-lab 2000 m -j2 --output-sync=target kernel-binaries "$B/kube-apiserver" "$B/etcd" images
wait_phase lab-provision

# 2. The two guests overlap: each leaves part of the host's CPU idle
# (docs/ci.md), and the end-to-end subset starts as soon as the cluster's
# binaries are built.
start_phase host 3000 bash -c "source hack/phases.sh; B=$B; $(declare -f m floor_proven host_work); host_work"
if phase_ok build-kernel-lab && phase_ok lab-provision; then
	# The agent's snapshot kill and deletion-order tests (about 300 s of
	# VM) run in make test-kernel, not here: make check's kernel lab is
	# its longest phase.
	NICE=0 start_phase kernel-lab 1800 m test-kernel -o images -o kernel-binaries -o pillar-lab SKIP="$KERNEL_CI_SKIP"
else
	skip_phase kernel-lab 1800 "what it needs did not build"
fi
await_phase build-cluster
if phase_ok build-cluster && phase_ok build-kernel-lab && phase_ok lab-provision; then
	# The subset pulls the chart's images through the lab registry, as a
	# user's cluster does (docs/ci.md: with the control plane on the host
	# this costs about 30 s more than importing them).
	run_phase e2e-ci 2100 m e2e-ci -o images -o cluster-tools -o "$B/e2e.test" -o pillar-lab
else
	skip_phase e2e-ci 2100 "what it needs did not build"
fi
[ -z "${PHASE_PID[kernel-lab]:-}" ] || wait_phase kernel-lab
wait_phase host

# 3.
run_phase test 900 m test-modules
if floor_proven; then
	skip_phase test-floor 600 "$(hack/floor.sh check)"
else
	run_phase test-floor 600 m test-floor
fi

phase_table
phases_ok
