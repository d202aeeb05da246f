# The Kubernetes node and control-plane binaries the lab cluster runs
# (tests/e2e/cluster), and `make e2e`, which boots that cluster in the
# kernel lab and runs the end-to-end suites against it.

# ------------------------------------------------------- cluster tools ----

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

.PHONY: cluster-tools
cluster-tools: $(CLUSTER_BINS) $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/helm ## Build the lab cluster's Kubernetes binaries (kubelet, controller-manager, scheduler, proxy, kubectl) into bin/

# As for the other tools: rebuilt only when the tools module changes.
$(CLUSTER_BINS): $(BIN)/%: $(TOOLS_MOD)
	@echo ">> building $*"
	cd $(TOOLS_DIR) && GOWORK=off go build -trimpath -ldflags '-s -w $(ldflags.$*)' -o $@ $(pkg.$*)
	@touch $@

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
# builds a busybox sandbox image.
.PHONY: e2e
e2e: pillar-lab images cluster-tools $(BIN)/e2e.test ## Boot a one-node Kubernetes cluster in the kernel lab and run the end-to-end suites (tests/e2e) in it (needs root)
	$(BIN)/pillar-lab test -m $(E2E_MEMORY_MB) -timeout 75m tests/e2e/... -- -test.timeout 60m $(E2EFLAGS)

# The end-to-end subset make check runs, in one guest of its own: the
# install, the hostPath baseline, a filesystem volume's and a block
# volume's whole lifecycle, the storage-node restart, pillar-agent and the
# serving controller killed mid-CreateVolume, and the CI subset of the
# Kubernetes external-storage suite (externalCISpecs in
# tests/e2e/pillar/external_test.go). make e2e runs every suite under
# tests/e2e, make e2e-full the whole external-storage suite.
E2E_CI_RUN ?= ^(TestInstall|TestHostPathBaseline|TestVolumes|TestStorageNodeRestart|TestAgentKilledMidProvisioning|TestControllerLeaderKilledMidCreate|TestExternalStorage)$$/^(ext4-zfs|block-lvm)$$

.PHONY: e2e-ci
e2e-ci: pillar-lab images cluster-tools $(BIN)/e2e.test ## Run the end-to-end subset of make check (install, volume lifecycles, storage-node restart, kills mid-CreateVolume, external-storage specs) in the lab cluster (needs root)
	$(BIN)/pillar-lab test -m $(E2E_MEMORY_MB) -timeout 80m tests/e2e/pillar -- -test.timeout 70m -test.run '$(E2E_CI_RUN)' $(E2EFLAGS)

# Every spec of the Kubernetes external-storage suite that needs no SSH to
# the nodes and no image from a registry ("any volume data source" needs
# the volume-data-source-validator's). Hours under TCG.
E2E_FULL_SKIP ?= \[Disruptive\]|\[Flaky\]|any volume data source

.PHONY: e2e-full
e2e-full: pillar-lab images cluster-tools $(BIN)/e2e.test ## Run the whole Kubernetes external-storage suite against pillar-csi in the lab cluster (hours under TCG; needs root)
	$(BIN)/pillar-lab test -m $(E2E_MEMORY_MB) -timeout 8h tests/e2e/pillar -- -test.timeout 7h50m -test.run '^TestExternalStorage$$' -external.focus='External.Storage' -external.skip='$(E2E_FULL_SKIP)' -external.timeout=7h30m $(E2EFLAGS)
