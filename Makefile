# pillar-csi — one Makefile for the whole workspace.
#
# Every Go module is built and tested on its own (GOWORK=off), exactly as a
# consumer of a released module would build it; `go.work` is for editors and
# for cross-module work. `make help` lists the targets.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

# The Go modules of the workspace, in release order (see RELEASING.md).
MODULES := api fencing configfs backends csidriver agent tests

BIN       := $(CURDIR)/bin
TOOLS_DIR := tests/tools
TOOLS_MOD := $(TOOLS_DIR)/go.mod $(TOOLS_DIR)/go.sum
export PATH := $(BIN):$(PATH)

# envtest (sigs.k8s.io/controller-runtime/pkg/envtest) finds kube-apiserver
# and etcd here; the API-server suites need nothing else.
export KUBEBUILDER_ASSETS := $(BIN)

# ---------------------------------------------------------------- tools ----

##@ Tools

# Tool binaries and the packages they are built from. Versions are pinned by
# $(TOOLS_DIR)/go.mod; the version of k8s.io/kubernetes is read from there so
# that the stamped version always matches the code.
TOOLS := kube-apiserver etcd helm csi-sanity controller-gen protoc-gen-go \
         protoc-gen-go-grpc staticcheck buf apidiff
pkg.kube-apiserver     := k8s.io/kubernetes/cmd/kube-apiserver
pkg.etcd               := ./etcd
pkg.helm               := helm.sh/helm/v3/cmd/helm
pkg.csi-sanity         := github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity
pkg.controller-gen     := sigs.k8s.io/controller-tools/cmd/controller-gen
pkg.protoc-gen-go      := google.golang.org/protobuf/cmd/protoc-gen-go
pkg.protoc-gen-go-grpc := google.golang.org/grpc/cmd/protoc-gen-go-grpc
pkg.staticcheck        := honnef.co/go/tools/cmd/staticcheck
pkg.buf                := github.com/bufbuild/buf/cmd/buf
pkg.apidiff            := golang.org/x/exp/cmd/apidiff

# mod-version is the version a go.mod ($(1)) requires of module $(2), in
# a require block or on a require line of its own.
mod-version = $(shell awk '$$1 == "$(2)" { print $$2; exit } $$1 == "require" && $$2 == "$(2)" { print $$3; exit }' $(1))

K8S_VERSION = $(call mod-version,$(TOOLS_DIR)/go.mod,k8s.io/kubernetes)
# Without a stamped version, kube-apiserver reports v0.0.0-master and
# clients (and envtest) cannot parse it.
ldflags.kube-apiserver = -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 2,$(subst ., ,$(K8S_VERSION:v%=x.%))) \
	-X k8s.io/component-base/version.gitMinor=$(word 3,$(subst ., ,$(K8S_VERSION:v%=x.%))) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z

TOOL_BINS := $(addprefix $(BIN)/,$(TOOLS))

# The oldest Kubernetes pillar-csi supports: kube-apiserver of the release
# pinned in $(FLOOR_DIR)/go.mod, built from a module of its own (its
# dependency graph cannot share a build list with the current release).
# 1.24 serves /version from client-go's version package, so both are
# stamped.
FLOOR_DIR     := tests/tools/oldkube
FLOOR_VERSION = $(call mod-version,$(FLOOR_DIR)/go.mod,k8s.io/kubernetes)
FLOOR_APISERVER := $(BIN)/kube-apiserver-floor
version-ldflags = $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,-X $(p).gitVersion=$(1) \
	-X $(p).gitMajor=$(word 2,$(subst ., ,$(1:v%=x.%))) -X $(p).gitMinor=$(word 3,$(subst ., ,$(1:v%=x.%))) \
	-X $(p).gitTreeState=clean -X $(p).buildDate=1970-01-01T00:00:00Z)

.PHONY: tools
tools: $(TOOL_BINS) $(FLOOR_APISERVER) ## Build every pinned tool into bin/ (idempotent; a warm run takes seconds)

$(FLOOR_APISERVER): $(FLOOR_DIR)/go.mod $(FLOOR_DIR)/go.sum
	@echo ">> building kube-apiserver $(FLOOR_VERSION) (the oldest Kubernetes supported)"
	$(TOOLCACHE) $@ $^ -- env -C $(FLOOR_DIR) GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags '-s -w $(call version-ldflags,$(FLOOR_VERSION))' -o $@ k8s.io/kubernetes/cmd/kube-apiserver

# A tool is rebuilt only when the tools module changes, and taken from the
# tool cache (hack/toolcache.sh) when this machine built the same before.
TOOLCACHE := hack/toolcache.sh
$(TOOL_BINS): $(BIN)/%: $(TOOLS_MOD)
	@echo ">> building $*"
	$(TOOLCACHE) $@ $^ -- env -C $(TOOLS_DIR) GOWORK=off go build -trimpath -ldflags '-s -w $(ldflags.$*)' -o $@ $(pkg.$*)

# etcd is the one tool whose source lives here.
$(BIN)/etcd: $(wildcard $(TOOLS_DIR)/etcd/*.go)

# ------------------------------------------------------------- generate ----

##@ Develop

# What make generate runs (go:generate lines, buf's plugins) and what make
# verify adds: neither needs kube-apiserver, so a change to one controller
# rule is checked without the minutes its build takes.
GEN_TOOLS    := $(addprefix $(BIN)/,controller-gen protoc-gen-go protoc-gen-go-grpc buf)
VERIFY_TOOLS := $(GEN_TOOLS) $(BIN)/staticcheck $(BIN)/actionlint

# A tool pinned by a module of its own under $(TOOLS_DIR) (its build list
# is upstream's and does not move the tools module's), built static
# through the tool cache and stamped with the version the module requires:
# $(call own-module-tool,NAME,DIR,MODULE,PACKAGE,VERSION_VAR).
define own-module-tool
$(BIN)/$(1): $(TOOLS_DIR)/$(2)/go.mod $(TOOLS_DIR)/$(2)/go.sum
	@echo ">> building $(1) $$(call mod-version,$(TOOLS_DIR)/$(2)/go.mod,$(3))"
	$$(TOOLCACHE) $$@ $$^ -- env -C $(TOOLS_DIR)/$(2) GOWORK=off CGO_ENABLED=0 go build -trimpath \
		-ldflags '-s -w -X $(5)=$$(call mod-version,$(TOOLS_DIR)/$(2)/go.mod,$(3))' \
		-o $$@ $(4)
endef

# actionlint checks the forge's workflows (.github/workflows).
$(eval $(call own-module-tool,actionlint,actionlint,github.com/rhysd/actionlint,github.com/rhysd/actionlint/cmd/actionlint,github.com/rhysd/actionlint.version))

.PHONY: verify-tools
verify-tools: $(VERIFY_TOOLS)

.PHONY: generate
generate: $(GEN_TOOLS) ## Regenerate all generated code (deepcopy, CRDs, RBAC, protobuf, the chart's copies) in place
	hack/generate.sh

# ---------------------------------------------------------------- verify ----

.PHONY: verify
verify: $(VERIFY_TOOLS) ## Fail on stale generated files, untidy go.mod/go.sum, unformatted code, vet or lint findings
	hack/verify.sh $(MODULES)

# ------------------------------------------------------------------ test ----

# One module, package and test: make test MODULE=csidriver PKG=./controller
# RUN=TestPublish. Without MODULE every module's tests run, and
# pillar-controller's on the oldest supported Kubernetes (make test-floor).
MODULE ?=
PKG    ?=
RUN    ?=
# Extra flags for `go test`, e.g. make test TESTFLAGS='-count=1 -v'.
TESTFLAGS ?=
# How many times fencing's crash test SIGKILLs a mark writer: a quick loop
# locally, the full one on CI.
export PILLAR_FENCING_CRASH_KILLS ?= $(if $(CI),1000,50)

# What each module's tests need from bin/ (envtest's API server, the
# chart's helm); the others need nothing.
test-tools.api       := kube-apiserver etcd
test-tools.csidriver := kube-apiserver etcd
test-tools.tests     := kube-apiserver etcd helm
go-test = cd $(1) && GOWORK=off go test $(if $(RUN),-run '$(RUN)') $(TESTFLAGS) $(2)

.PHONY: test test-modules
ifneq ($(MODULE),)
test: $(addprefix $(BIN)/,$(test-tools.$(MODULE))) ## Run every module's tests (GOWORK=off) with the real API-server suites, and make test-floor; MODULE=, PKG=, RUN= pick one
	@[ -f $(MODULE)/go.mod ] || { echo "make test: no module $(MODULE) (one of: $(MODULES))" >&2; exit 1; }
	$(call go-test,$(MODULE),$(or $(PKG),./...))
else
test: test-modules test-floor
endif

test-modules: $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/helm
	@failed=; for m in $(MODULES); do \
		echo ">> go test $$m"; \
		($(call go-test,$$m,./...)) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: tests failed in:$$failed" >&2; exit 1; fi

.PHONY: test-floor
test-floor: $(FLOOR_APISERVER) $(BIN)/etcd ## Run pillar-controller's suites against the oldest supported kube-apiserver; a full pass is recorded in tests/tools/oldkube/PROVEN
	@echo ">> go test csidriver/controllerapp and csidriver/controller against kube-apiserver $(FLOOR_VERSION)"
	cd csidriver && PILLAR_TEST_KUBE_APISERVER=$(FLOOR_APISERVER) GOWORK=off go test -count=1 $(if $(RUN),-run '$(RUN)') $(TESTFLAGS) ./controllerapp/ ./controller/
	$(if $(RUN)$(TESTFLAGS),,hack/floor.sh record $(FLOOR_VERSION))

##@ Kernel lab

# The kernel lab's command; `go build` decides whether it is stale.
.PHONY: pillar-lab lab-provision
pillar-lab:
	cd tests && GOWORK=off go build -o $(BIN)/pillar-lab ./cmd/pillar-lab

lab-provision: pillar-lab ## Install and build what the kernel lab needs (Debian packages, the guest kernel, ZFS for it; idempotent, needs root)
	$(BIN)/pillar-lab provision

# The guest runs Go ~25x slower than the host, so the suites that run the
# shipped binaries (tests/kernel/controller) find them in bin/: they are
# built here, never in the guest. etcd and kube-apiserver, from bin/ too,
# run on the host beside the guest. The images' suite (tests/kernel/images)
# chroots into the root filesystems make images unpacks.
# One VM boot runs every package; tests/kernel/controller, csi-sanity
# against the real stack included, is the longest of them. PKG= and RUN= pick packages and tests
# (make test-kernel PKG=tests/kernel/smoke RUN=TestSmoke), and then only
# what those packages read is built; SKIP= leaves tests out (-test.skip).
KERNEL_VM_TIMEOUT  ?= 80m
KERNEL_PKG_TIMEOUT ?= 45m
# tests/kernel/controller runs against etcd and kube-apiserver on the host
# (pillar-lab test -apiserver), which the guest reaches through QEMU's
# user-mode network.
kernel-api = $(or $(if $(PKG),,all),$(findstring controller,$(PKG)),$(findstring ...,$(PKG)))
kernel-needs = pillar-lab kernel-binaries \
	$(if $(kernel-api),$(BIN)/kube-apiserver $(BIN)/etcd) \
	$(if $(or $(if $(PKG),,all),$(findstring images,$(PKG)),$(findstring ...,$(PKG))),images)

.PHONY: test-kernel kernel-binaries
test-kernel: $(kernel-needs) ## Run the real-kernel suites inside a Debian kernel under QEMU (needs root); PKG=, RUN= pick packages and tests
	$(BIN)/pillar-lab test -timeout $(KERNEL_VM_TIMEOUT) -package-timeout $(KERNEL_PKG_TIMEOUT) $(if $(kernel-api),-apiserver) $(if $(RUN),-run '$(RUN)') $(LABFLAGS) $(PKG) $(if $(SKIP),-- -test.skip '$(SKIP)')
	$(if $(PKG),,cd tests && PILLAR_LAB_HOST_TESTS=1 GOWORK=off go test -count=1 -run '^TestCheckoutUnderTmp$$' ./kernelvm/)

kernel-binaries:
	$(call build-binary,pillar-controller)
	$(call build-binary,pillar-agent)
	$(call build-binary,pillar-node)

# The in-VM benchmarks, each against its baseline in the same run: configfs
# Apply/Remove against a direct-syscall floor and a shell script; backend
# create+delete of 64 volumes against the same commands in a shell loop;
# pillar-agent create+export against the raw backend and configfs calls (plus
# 128 concurrent calls, reconcile of 256 exports after a wipe, and RSS);
# pillar-node stage+publish against the raw connect, mkfs, mount and bind
# (plus RSS); pillar-controller's CreateVolume+ControllerPublish against
# the same agent calls made directly, 100 concurrent creates on thick and
# sparse ZFS and LVM thin against 100 one at a time and against 100 raw
# creates and exports at once (the floor), snapshots and restores against
# the raw commands, and its RSS with 1,000 PillarVolumeStates. Each reports
# its ratios.
BENCH_KERNEL = $(BIN)/pillar-lab test -timeout 60m $(1) -- -test.run '^$$' -test.bench . -test.benchtime $(2) -test.timeout 40m

.PHONY: bench-kernel
bench-kernel: pillar-lab kernel-binaries $(BIN)/kube-apiserver $(BIN)/etcd ## Run the real-kernel benchmarks (configfs, backends, agent, node, controller) in the kernel lab (needs root)
	$(call BENCH_KERNEL,configfs,20x)
	$(call BENCH_KERNEL,tests/kernel/backends,1x)
	$(call BENCH_KERNEL,tests/kernel/agent,1x)
	$(call BENCH_KERNEL,tests/kernel/node,10x)
	$(call BENCH_KERNEL,-apiserver tests/kernel/controller,1x)

##@ Start here

.PHONY: demo
demo: pillar-lab images cluster-tools ## Boot a Kubernetes cluster in the kernel lab, helm install pillar-csi, bind a PVC, write and read it from pods (needs root)
	cd tests && GOWORK=off go build -o $(BIN)/pillar-demo ./demo
	$(BIN)/pillar-lab run -m $(E2E_MEMORY_MB) -timeout 45m -- $(BIN)/pillar-demo -root $(CURDIR)

##@ Kernel lab

.PHONY: demo-datapath
demo-datapath: pillar-lab ## Run the data path through pillar-agent and pillar-node alone in the kernel lab, no cluster (needs root; DEMOFLAGS=-backend=lvm for LVM)
	$(call build-binary,pillar-agent)
	$(call build-binary,pillar-node)
	cd tests && GOWORK=off go build -o $(BIN)/pillar-demo-datapath ./demo/datapath
	$(BIN)/pillar-lab run -- $(BIN)/pillar-demo-datapath -bin $(BIN) $(DEMOFLAGS)

##@ Start here

# hack/check.sh runs the host's work beside the guests and prints each
# phase's time against its budget.
.PHONY: check
check: ## Everything CI runs: verify, test, test-kernel, e2e-ci, images-check, in phases with time budgets
	hack/check.sh

##@ Develop

# Benchmarks that need no VM; `make bench-kernel` runs the in-VM ones.
BENCHFLAGS ?= -benchmem -count=1

.PHONY: bench
bench: ## Run every module's Go benchmarks
	@for m in $(MODULES); do \
		echo ">> go test -bench $$m"; \
		(cd $$m && GOWORK=off go test -run '^$$' -bench . $(BENCHFLAGS) ./...) || exit 1; \
	done

##@ Develop

# ------------------------------------------------------------ fragments ----

# Targets with a home of their own (images, the Helm chart) live in mk/.
include $(sort $(wildcard mk/*.mk))

# ----------------------------------------------------------------- build ----

# The shipped binaries: module directory and main package of each. A binary
# whose main package does not exist yet is reported, not silently skipped.
main.pillar-controller := csidriver ./cmd/pillar-controller
main.pillar-agent      := agent ./cmd/pillar-agent
main.pillar-node       := csidriver ./cmd/pillar-node
ALL_BINARIES := pillar-controller pillar-agent pillar-node
BINARIES     := $(foreach b,$(ALL_BINARIES),$(if $(wildcard $(word 1,$(main.$b))/cmd/$b/*.go),$b))

# The version the binaries report (GetAgentInfo, GetPluginInfo, metrics):
# the commit, marked -dirty for a changed tree. A release build sets
# VERSION to the module's tag (RELEASING.md).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
ldflags.pillar-controller := -X github.com/pillar-csi/pillar-csi/csidriver/driver.Version=$(VERSION)
ldflags.pillar-agent      := -X main.buildVersion=$(VERSION)
ldflags.pillar-node       := -X github.com/pillar-csi/pillar-csi/csidriver/driver.Version=$(VERSION)

# Static (CGO_ENABLED=0): the images carry the binaries without a C
# library of their own, and a cgo build would need the build host's.
define build-binary
	cd $(word 1,$(main.$(1))) && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags '$(ldflags.$(1))' -o $(BIN)/$(1) $(word 2,$(main.$(1)))

endef

.PHONY: build
build: ## Build pillar-controller, pillar-agent and pillar-node (those that exist yet) into bin/
	$(foreach b,$(BINARIES),$(call build-binary,$b))
	@$(foreach b,$(filter-out $(BINARIES),$(ALL_BINARIES)),echo "build: $b has no main package yet" >&2;)

# --------------------------------------------------------------- release ----

##@ Release

# make release VERSION=x.y.z prints the release of what a user installs
# (images, chart, CHANGELOG.md, with REGISTRY= the push of images and
# chart) and checks that the chart packages with that version; DO=1
# performs it (hack/release.sh).
.PHONY: release
release: $(BIN)/helm ## Print the release of VERSION=x.y.z (images, chart, CHANGELOG; REGISTRY= pushes them); DO=1 performs it
	DO='$(DO)' hack/release.sh '$(VERSION)' '$(REGISTRY)'

.PHONY: release-plan
release-plan: $(BIN)/apidiff ## Print the release plan for one module: make release-plan MODULE=configfs
	hack/release-plan.sh $(MODULE)

# ------------------------------------------------------------------ misc ----

##@ Develop

.PHONY: clean
clean: ## Remove bin/ (tools and binaries)
	rm -rf $(BIN)

##@ Start here

.PHONY: help
print-%: ; @echo $($*)
help: ## Show this help, target by target in groups
	@awk -v order='Start here|Develop|Kernel lab|Lab cluster|Images|Tools|Release' -f hack/help.awk $(MAKEFILE_LIST)
