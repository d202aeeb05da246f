// Package chart tests the Helm chart in deploy/charts/pillar-csi: helm lint
// --strict, helm template over a matrix of values with assertions on the
// typed objects each case renders, a server-side dry-run apply of every
// rendered object against a real kube-apiserver (envtest, with the chart's
// CRDs and cert-manager's installed), the schema's refusal of wrong values,
// and that the chart's copies of the CRDs, of pillar-controller's RBAC and
// of its values table are current. Two tests helm install the chart into
// that API server: the agent token survives upgrades, and the admission
// policy keeps everyone but pillar-controller from changing the spec of a
// PillarVolumeState or deleting one.
//
// It needs bin/helm and, in $KUBEBUILDER_ASSETS, kube-apiserver and etcd
// (`make tools`; `make test` and `make chart-test` set KUBEBUILDER_ASSETS).
// Missing tools fail the suite; nothing is skipped.
package chart
