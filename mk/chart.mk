# The Helm chart (deploy/charts/pillar-csi) and its tests (tests/chart).

##@ Develop

CHART_DIR := deploy/charts/pillar-csi

.PHONY: chart-test
chart-test: $(BIN)/helm $(BIN)/kube-apiserver $(BIN)/etcd ## Lint the Helm chart, render its values matrix and dry-run apply it against kube-apiserver (tests/chart)
	cd tests && GOWORK=off go test -count=1 $(TESTFLAGS) ./chart/...

.PHONY: chart-docs
chart-docs: ## Regenerate the chart's copies of the CRDs and the controller's RBAC, and its README values table
	hack/chart-sync.sh
