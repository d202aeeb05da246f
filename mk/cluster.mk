# The Kubernetes node and control-plane binaries the lab cluster runs
# (tests/e2e/cluster), and `make e2e`, which boots that cluster in the
# kernel lab and runs the end-to-end suites against it.

# ------------------------------------------------------- cluster tools ----

##@ Lab cluster

# Built from the same k8s.io/kubernetes as kube-apiserver (the tools
# module's `tool` lines pin them) and stamped the same way: kubectl and the
# kubelet refuse to talk to, or register with, a server whose version
# they cannot parse. They use cgo (the kubelet's cadvisor needs it); they
# run on the lab's guest kernel from the host's userland, so that is fine.
CLUSTER_TOOLS := kubelet kube-controller-manager kube-scheduler kube-proxy kubectl
pkg.kubelet                 := k8s.io/kubernetes/cmd/kubelet
pkg.kube-controller-manager := k8s.io/kubernetes/cmd/kube-controller-manager
pkg.kube-scheduler          := k8s.io/kubernetes/cmd/kube-scheduler
pkg.kube-proxy              := k8s.io/kubernetes/cmd/kube-proxy
pkg.kubectl                 := k8s.io/kubernetes/cmd/kubectl
$(foreach t,$(CLUSTER_TOOLS),$(eval ldflags.$t = $$(ldflags.kube-apiserver)))

CLUSTER_BINS := $(addprefix $(BIN)/,$(CLUSTER_TOOLS))

# CRDs that a module of the Go module proxy ships, copied from the module
# cache (downloaded and checked against go.sum first) into a directory of
# bin/ that the lab cluster applies as a cluster administrator does:
# $(call module-crds,DIR,TOOL,MODULE,SUBDIR,GLOB) copies SUBDIR/GLOB of
# MODULE at the version tests/tools/TOOL/go.mod pins into DIR.
define module-crds
$(1)/.stamp: $(TOOLS_DIR)/$(2)/go.mod $(TOOLS_DIR)/$(2)/go.sum
	rm -rf $(1) && mkdir -p $(1)
	dir=$$$$(env -C $(TOOLS_DIR)/$(2) GOWORK=off go mod download -json $(3) | \
		sed -n 's/^\t"Dir": "\(.*\)",$$$$/\1/p') && [ -n "$$$$dir" ] && cp "$$$$dir"/$(4)/$(5) $(1)/
	touch $$@
endef

# The snapshot CRDs (snapshot.storage.k8s.io and groupsnapshot), which the
# lab applies before the install (docs/install.md, "Snapshots"): config/crd
# of github.com/kubernetes-csi/external-snapshotter/client/v8.
SNAPSHOT_CRDS := $(BIN)/snapshot-crds
$(eval $(call module-crds,$(SNAPSHOT_CRDS),sidecars/snapshotter,github.com/kubernetes-csi/external-snapshotter/client/v8,config/crd,*storage.k8s.io_*.yaml))

# cert-manager for TestCertManagerMutualTLS (make e2e-certmanager): its
# CRDs (deploy/crds of github.com/cert-manager/cert-manager, the release
# tests/tools/certmanager pins, whose CRDs the chart suite dry-runs
# against) and its controllers, built static from the same module
# (tests/tools/certmanager/controller says what it runs and why no
# webhook). Not part of cluster-tools: make check does not run the test.
CERTMANAGER_CRDS := $(BIN)/certmanager-crds
$(eval $(call module-crds,$(CERTMANAGER_CRDS),certmanager,github.com/cert-manager/cert-manager,deploy/crds,*.yaml))
$(eval $(call own-module-tool,cert-manager-controller,certmanager,github.com/cert-manager/cert-manager,./controller,github.com/cert-manager/cert-manager/pkg/util.AppVersion))
$(BIN)/cert-manager-controller: $(wildcard $(TOOLS_DIR)/certmanager/controller/*.go)
CERTMANAGER := $(BIN)/cert-manager-controller $(CERTMANAGER_CRDS)/.stamp

.PHONY: certmanager
certmanager: $(CERTMANAGER) ## Build cert-manager's controllers and fetch its CRDs, at the release tests/tools/certmanager pins, into bin/ (for make e2e-certmanager)

.PHONY: cluster-tools
cluster-tools: $(CLUSTER_BINS) $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/helm $(BIN)/registry $(IMAGEBUILD) $(BIN)/agent-probe $(SNAPSHOT_CRDS)/.stamp ## Build the lab cluster's Kubernetes binaries (kubelet, controller-manager, scheduler, proxy, kubectl), its registry, the push tool and the agent probe, and fetch the snapshot CRDs, into bin/

# The stranger of tests/e2e/pillar's TestAgentRefusesStrangers: static, so
# that a pod of any image runs it from bin/.
$(BIN)/agent-probe: tests/go.mod $(wildcard tests/e2e/cmd/agent-probe/*.go) $(wildcard api/agentauth/*.go)
	cd tests && GOWORK=off CGO_ENABLED=0 go build -trimpath -o $@ ./e2e/cmd/agent-probe

# The lab cluster's private registry: the CNCF distribution registry, from
# the Go module proxy at the version tests/tools/registry/go.mod pins.
$(eval $(call own-module-tool,registry,registry,github.com/distribution/distribution/v3,github.com/distribution/distribution/v3/cmd/registry,github.com/distribution/distribution/v3/version.version))

# A NetworkPolicy implementation for the tests that need policies enforced
# (the lab's bridge CNI enforces none): kube-network-policies, from the Go
# module proxy at the version tests/tools/netpol/go.mod pins. Its command
# has no version variable; main.version is a name the linker ignores.
$(eval $(call own-module-tool,kube-network-policies,netpol,sigs.k8s.io/kube-network-policies,sigs.k8s.io/kube-network-policies/cmd,main.version))

# As for the other tools: rebuilt only when the tools module changes.
$(CLUSTER_BINS): $(BIN)/%: $(TOOLS_MOD)
	@echo ">> building $*"
	$(TOOLCACHE) $@ $^ -- env -C $(TOOLS_DIR) GOWORK=off go build -trimpath -ldflags '-s -w $(ldflags.$*)' -o $@ $(pkg.$*)

# ----------------------------------------------------------------- e2e ----

# Extra flags for the e2e test binaries, e.g. make e2e E2EFLAGS='-test.run TestHelm'.
E2EFLAGS ?=
# 3 GiB: the control plane takes ~700 MiB and the pillar-csi suite peaked at
# 1.84 GiB with its pools and pods; 1 GiB is the
# floor, 768 MiB thrashes 9p's page cache.
E2E_MEMORY_MB ?= 3072

# The suites under tests/e2e boot their cluster in a guest of their own
# (make test-kernel leaves them out). A start takes about a minute of
# guest time on an idle host and took over 8 with the host's two cores
# shared by three guests, hence the generous timeouts. Images from make images in
# bin/images are imported when present; without pause.tar the harness
# builds a busybox sandbox image. TestPerformance, which alone takes longer
# than the rest, runs with make e2e-perf, and TestCertManagerMutualTLS
# (about 15 minutes, and cert-manager to build) with make e2e-certmanager.
.PHONY: e2e
e2e: pillar-lab images cluster-tools $(BIN)/e2e.test ## Boot a one-node Kubernetes cluster in the kernel lab and run the end-to-end suites (tests/e2e) in it (needs root)
	$(BIN)/pillar-lab test -m $(E2E_MEMORY_MB) -timeout 75m tests/e2e/... -- -test.timeout 60m -test.skip '^(TestPerformance|TestProvisioningAtScale|TestCertManagerMutualTLS)$$' $(E2EFLAGS)

# The end-to-end subset make check runs, in one guest: the install and the
# rest of the README's quickstart, strangers calling the agent from a pod
# and the node's network (TestAgentRefusesStrangers), the install switched
# to the chart's own mTLS and back with strangers' certificates refused
# (TestGeneratedMutualTLS, about 5 minutes), the ExportSpecMissing recovery
# procedure of docs/troubleshooting.md, the storage node's agent restarted
# with its exports wiped under a writing pod (TestStorageNodeRestart), and
# the CI subset of the
# Kubernetes external-storage suite (externalCISpecs in
# tests/e2e/pillar/external_test.go). The CI machine's TCG guest runs two
# to three times slower on some days than on others (the same eight
# external-storage specs took 622 s on one day, six of them 1862 s on
# another), so the subset is chosen to finish in about half an hour on a
# slow day, and the time limit (65 minutes for the tests: with
# TestGeneratedMutualTLS the subset ran past 40 on a machine shared with
# two more guests) makes a hang fail here, with its output, rather than
# at CI's own limit. make e2e runs every suite under
# tests/e2e in one guest (the agent and the serving controller killed
# mid-CreateVolume, that controller frozen and thawed, the worker lost and
# force-detached, the volume lifecycles, the hostPath baseline and
# csi-sanity among them), make e2e-two the tests that need two kernels,
# make e2e-full the whole external-storage suite.
E2E_CI_RUN ?= ^(TestInstall|TestQuickstart|TestAgentRefusesStrangers|TestGeneratedMutualTLS|TestExportSpecMissingRecovery|TestStorageNodeRestart|TestExternalStorage)$$

.PHONY: e2e-ci
e2e-ci: pillar-lab images cluster-tools $(BIN)/e2e.test ## Run the end-to-end subset of make check in one guest (install, quickstart, strangers refused by the agent, ExportSpecMissing recovery, agent restart, external-storage specs) in the lab cluster (needs root)
	$(BIN)/pillar-lab test -m $(E2E_MEMORY_MB) -timeout 70m -cluster-control-plane tests/e2e/pillar -- -test.timeout 65m -test.run '$(E2E_CI_RUN)' -snapshot.backends=zfs $(E2EFLAGS)

# The chart's cert-manager mode with a real cert-manager
# (TestCertManagerMutualTLS): cert-manager's controllers run in the guest
# as a process beside the node, the install switches to tls.mode
# certManager and back, and the agents' and the controller's certificates
# are re-issued under a writing pod. One guest, the control plane on the
# host as in make e2e-ci; not part of make check.
E2E_CERTMANAGER_RUN ?= ^(TestInstall|TestCertManagerMutualTLS)$$

.PHONY: e2e-certmanager
e2e-certmanager: pillar-lab images cluster-tools $(CERTMANAGER) ## Prove the chart's cert-manager mode in the lab cluster with cert-manager's controllers: certificates issued, strangers refused, both certificates re-issued under a writing pod (needs root)
	$(BIN)/pillar-lab test -m $(E2E_MEMORY_MB) -timeout 45m -cluster-control-plane tests/e2e/pillar -- -test.timeout 40m -test.run '$(E2E_CERTMANAGER_RUN)' $(E2EFLAGS)

# Two kernels (make e2e-two): the storage node is a guest of its own, the
# peer, joined to the main guest (control plane and worker) by a virtual
# link, with its pools and its state (the agent's fencing marks) on raw
# disks that survive its power cut. Volumes
# cross the link between the two kernels, and TestStorageNodePowerCut
# kills the storage guest's QEMU and boots it again. The storage guest is
# also a second worker (cordoned; TestTwoWorkers places pods on it by
# name): an RWO volume refused to it while the main node holds it, moved
# to it, and read back there after its own power cut, a worker's real
# reboot; a ReadOnlyMany volume read by a pod on each node at once
# (TestReadOnlyMany). The main guest's node then becomes a second
# storage node (TestScaleOutTwoStorageNodes: pools, an agent, a store and
# a class of its own): a burst of claims bound on the peer's class alone,
# then spread over both classes, and the peer's power cut while a pod
# writes on each node, the main node's writer never interrupted. The
# storage guest has one vCPU: two guests of two vCPUs on two host cores slowed everything
# 1.5-2.4x, and it idles once its node is up.
# make check does not run them: on the CI machine the two guests ran
# 1.6x slower than on an idle host (the install and the power cut took
# 1273 s of VM time instead of 774 s) and the storage node's recovery
# outlasted the test's limit; make check keeps the one-guest stand-in,
# TestStorageNodeRestart. make e2e-power-cut is the shorter part (install
# and power cut). Measured on an idle host: make e2e-two 25 minutes of VM
# time before TestTwoWorkers, which adds about 10 (628 s on a slow host),
# make e2e-power-cut about 13. TestScaleOutTwoStorageNodes (two bursts
# of 40 claims and their deletion, a third power cut) is not measured
# yet: the time limits below were raised by 50 minutes for it on a
# guess, to be set from its first runs.
E2E_TWO_RUN ?= ^(TestInstall|TestQuickstart|TestVolumes|TestReadOnlyMany|TestTenantEgressPolicy|TestStorageNodePowerCut|TestTwoWorkers|TestScaleOutTwoStorageNodes)$$
E2E_POWER_CUT_RUN ?= ^(TestInstall|TestStorageNodePowerCut)$$
E2E_PEER_MEMORY_MB ?= 1536
# The peer's disks (sparse): the zpool, the volume group (as large as the
# one-guest VG, whose thin pool tests/e2e/deploy sizes for TestSnapshots),
# the agent's state.
two_guests = $(BIN)/pillar-lab test -m $(E2E_MEMORY_MB) -peer-m $(E2E_PEER_MEMORY_MB) -peer-smp 1 -peer-disks 4096,3072,256
e2e_two = $(two_guests) -timeout 130m tests/e2e/pillar -- -test.timeout 120m

.PHONY: e2e-two
e2e-two: pillar-lab images cluster-tools $(BIN)/kube-network-policies ## Run the end-to-end tests that need two kernels (storage node and worker in separate guests, the storage node's power cut, the storage node as a second worker, the worker as a second storage node) in the lab (needs root)
	$(e2e_two) -test.run '$(E2E_TWO_RUN)' $(E2EFLAGS)

.PHONY: e2e-power-cut
e2e-power-cut: pillar-lab images cluster-tools ## The short part of make e2e-two: the install across two kernels and the storage node's power cut (needs root)
	$(e2e_two) -test.run '$(E2E_POWER_CUT_RUN)' $(E2EFLAGS)

# What a user waits for, against what the cluster itself costs
# (TestPerformance): for pillar-csi, the floor driver (a CSI driver that
# does nothing, with pillar-csi's own csi-provisioner) and
# local-path-provisioner in turns, in one cluster boot: 20 claims bound and
# their pods started one after another, bursts of 50 and 100 claims, and
# 50 claims with their pods at once. The table goes to bin/perf/perf.md,
# the picture to bin/perf/perf.svg (the run's artifacts, which pillar-lab
# copies out of the guest). Then the external-storage suite's
# volume-lifecycle-performance spec, 300 claims at once, for the floor
# driver and pillar-csi (TestProvisioningAtScale). 4 GiB: a hundred claims or fifty pods
# with their sandboxes and NVMe/TCP controllers on top of the control
# plane. Not part of make check. E2EFLAGS picks parts, e.g.
# E2EFLAGS='-perf.sequential=0 -perf.bursts=50 -perf.pods=0'.
E2E_PERF_RUN ?= ^(TestInstall|TestPerformance|TestProvisioningAtScale)$$
E2E_PERF_MEMORY_MB ?= 4096

# The floor driver, static for its image (tests/e2e/cmd/floor-csi).
$(BIN)/floor-csi: tests/go.mod $(wildcard tests/e2e/cmd/floor-csi/*.go) $(wildcard csidriver/registration/*.go)
	cd tests && GOWORK=off CGO_ENABLED=0 go build -trimpath -o $@ ./e2e/cmd/floor-csi

# rancher's local-path-provisioner, from the Go module proxy at the
# release tests/tools/localpath/go.mod pins. Its version is a constant
# (main.VERSION) the linker cannot set.
$(eval $(call own-module-tool,local-path-provisioner,localpath,github.com/rancher/local-path-provisioner,github.com/rancher/local-path-provisioner,main.VERSION))

.PHONY: e2e-perf
e2e-perf: pillar-lab images cluster-tools $(BIN)/e2e.test $(BIN)/floor-csi $(BIN)/local-path-provisioner ## Measure claims bound and pods started, one after another and in bursts, for pillar-csi, a do-nothing CSI driver and local-path-provisioner in one lab cluster (needs root)
	$(BIN)/pillar-lab test -m $(E2E_PERF_MEMORY_MB) -artifacts $(BIN)/perf -timeout 330m tests/e2e/pillar -- -test.timeout 320m -test.run '$(E2E_PERF_RUN)' $(E2EFLAGS)

# Every spec of the Kubernetes external-storage suite that needs no SSH to
# the nodes and no image from a registry ("any volume data source" needs
# the volume-data-source-validator's): 127 specs of k8s.io/kubernetes
# v1.37.2, hours under TCG. make e2e-full runs them in four parts, each
# in a cluster boot of its own so that one part fits a working session
# and a failure is found without waiting for the rest; make e2e-full-1
# (-2, -3, -4) runs one part. The parts split the suite by the name of the
# test suite after the pattern ("] subPath should ..."): part 1 is what
# every claim meets (provisioning, the volume and volumeMode checks,
# expansion, ReadWriteOncePod, fsGroup), part 2 subPath and ephemeral
# volumes, part 4 the specs that need a second node (a pod recreated "on
# different node"), part 3 every other spec, so a suite upstream adds
# lands there. Part 4 runs in two guests (as make e2e-two): the storage
# node, uncordoned for it, is the second node, and the main guest hands
# it the suite's test images. It runs on a class that consents to
# writers on several nodes, with the RWX capability (-external.rwx), so
# that pods of both nodes share a Block volume at once; the same spec's
# filesystem patterns are left out, because pillar-csi refuses them.
E2E_FULL_SKIP ?= \[Disruptive\]|\[Flaky\]|any volume data source
E2E_FULL_1 = provisioning|volumes|volumeIO|volumeMode|volume-expand|read-write-once-pod|fsgroupchangepolicy
E2E_FULL_2 = subPath|ephemeral
E2E_FULL_4 = on different node
e2e_full_focus_1 = External.Storage.*\] ($(E2E_FULL_1))\s
e2e_full_focus_2 = External.Storage.*\] ($(E2E_FULL_2))\s
e2e_full_focus_3 = External.Storage
e2e_full_focus_4 = External.Storage.*$(E2E_FULL_4)
e2e_full_skip_1 = $(E2E_FULL_SKIP)|$(E2E_FULL_4)
e2e_full_skip_2 = $(E2E_FULL_SKIP)|$(E2E_FULL_4)
e2e_full_skip_3 = $(E2E_FULL_SKIP)|$(E2E_FULL_4)|\] ($(E2E_FULL_1)|$(E2E_FULL_2))\s
e2e_full_skip_4 = $(E2E_FULL_SKIP)

.PHONY: e2e-full e2e-full-1 e2e-full-2 e2e-full-3 e2e-full-4
e2e-full: e2e-full-1 e2e-full-2 e2e-full-3 e2e-full-4 ## Run the whole Kubernetes external-storage suite against pillar-csi in the lab cluster, in four parts (hours under TCG; needs root)
e2e-full-1 e2e-full-2 e2e-full-3: e2e-full-%: pillar-lab images cluster-tools $(BIN)/e2e.test $(BIN)/agnhost ## One part of make e2e-full (needs root)
	$(BIN)/pillar-lab test -m $(E2E_MEMORY_MB) -timeout 4h tests/e2e/pillar -- -test.timeout 3h50m -test.run '^TestExternalStorage$$' -external.focus='$(e2e_full_focus_$*)' -external.skip='$(e2e_full_skip_$*)' -external.timeout=3h30m $(E2EFLAGS)
e2e-full-4: pillar-lab images cluster-tools $(BIN)/e2e.test $(BIN)/agnhost ## The part of make e2e-full that needs a second node, in two guests (needs root)
	$(two_guests) -timeout 2h tests/e2e/pillar -- -test.timeout 110m -test.run '^TestExternalStorage$$' -external.focus='$(e2e_full_focus_4)' -external.skip='$(e2e_full_skip_4)' -external.rwx -external.timeout=90m $(E2EFLAGS)

# ------------------------------------------------------- kept cluster ----

# A lab cluster kept up between runs (tests/e2e/kept), for the one-test
# loop: make e2e-up boots the guest, starts the cluster and the pools and
# returns (4-5 minutes under TCG); make e2e-run compiles tests/e2e/pillar
# on the host and runs it against that cluster (RUN, E2EFLAGS), the first
# run that needs the driver installing it; make e2e-down tears it down.
# One kept cluster per lab cache; it stops by itself after
# E2E_KEPT_LIFETIME. The cluster runs the images and binaries of bin/ as
# they were at make e2e-up: after changing the driver, make images and
# make e2e-down e2e-up (see tests/README.md).
E2E_KEPT_LIFETIME ?= 4h

.PHONY: pillar-kept e2e-up e2e-run e2e-down
pillar-kept:
	cd tests && GOWORK=off go build -o $(BIN)/pillar-kept ./e2e/cmd/pillar-kept

e2e-up: pillar-lab pillar-kept images cluster-tools ## Boot a lab guest whose cluster stays up for make e2e-run until make e2e-down (or E2E_KEPT_LIFETIME, 4h); returns once it is ready (needs root)
	$(BIN)/pillar-kept up -m $(E2E_MEMORY_MB) -lifetime $(E2E_KEPT_LIFETIME)

e2e-run: pillar-kept ## Compile tests/e2e/pillar and run it against the kept cluster of make e2e-up, e.g. make e2e-run RUN=TestQuickstart (needs root)
	$(BIN)/pillar-kept run $(if $(RUN),-run '$(RUN)') -- $(E2EFLAGS)

e2e-down: pillar-kept ## Tear down the kept cluster of make e2e-up and power its guest off
	$(BIN)/pillar-kept down
