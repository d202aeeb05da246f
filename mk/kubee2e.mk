# The Kubernetes storage end-to-end suite for external CSI drivers
# (bin/e2e.test), built from the k8s.io/kubernetes release that
# tests/tools/kubee2e pins. TestExternalStorage (tests/e2e/pillar) runs it
# in the lab cluster with the driver file
# tests/e2e/pillar/testdata/external-driver.yaml.

##@ Tools

KUBEE2E_DIR := $(TOOLS_DIR)/kubee2e
KUBEE2E_SRC := $(KUBEE2E_DIR)/go.mod $(KUBEE2E_DIR)/go.sum $(KUBEE2E_DIR)/e2e_test.go
KUBEE2E_K8S_VERSION = $(call mod-version,$(KUBEE2E_DIR)/go.mod,k8s.io/kubernetes)

.PHONY: e2e-test-binary
e2e-test-binary: $(BIN)/e2e.test ## Build the Kubernetes external-storage e2e suite (bin/e2e.test) from the Go module proxy

# Stamped like kube-apiserver, with the version this module pins: the
# framework logs it, and specs that compare client and server versions
# cannot parse v0.0.0-master. As for the other tools, rebuilt only when
# the module changes, and taken from the tool cache when built before.
# A cold build takes about ten minutes and 2.8 GB of build cache.
$(BIN)/e2e.test: $(KUBEE2E_SRC)
	@echo ">> building e2e.test (k8s.io/kubernetes $(KUBEE2E_K8S_VERSION))"
	$(TOOLCACHE) $@ $^ -- env -C $(KUBEE2E_DIR) GOWORK=off go test -c -trimpath -ldflags '-s -w $(call version-ldflags,$(KUBEE2E_K8S_VERSION))' -o $@ .

# agnhost, the Kubernetes e2e suite's test image's binary, from the same
# k8s.io/kubernetes release (a tool of tests/tools/kubee2e). make e2e-full
# serves it under the agnhost image's name: the subPath specs run its
# mounttest, the host-exec pods its pause. Static, so that it runs over
# the busybox applets with no libc.
.PHONY: agnhost
agnhost: $(BIN)/agnhost ## Build the e2e suite's agnhost (bin/agnhost) from the Go module proxy

$(BIN)/agnhost: $(KUBEE2E_DIR)/go.mod $(KUBEE2E_DIR)/go.sum
	@echo ">> building agnhost (k8s.io/kubernetes $(KUBEE2E_K8S_VERSION))"
	$(TOOLCACHE) $@ $^ -- env -C $(KUBEE2E_DIR) GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $@ k8s.io/kubernetes/test/images/agnhost
