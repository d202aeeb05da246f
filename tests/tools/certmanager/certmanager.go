// Package certmanager pins the cert-manager release the lab and the
// chart's tests use: the chart suite installs its CRDs (deploy/crds/ of
// github.com/cert-manager/cert-manager) before it dry-runs the chart's
// cert-manager mode against kube-apiserver, and make certmanager builds
// its controllers (controller/) and copies the same CRDs into bin/ for
// the lab cluster's TestCertManagerMutualTLS. One module pins both, so
// the CRDs and the controllers that serve them are always one release.
//
// To move to another release: GOWORK=off go get
// github.com/cert-manager/cert-manager@vX.Y.Z && GOWORK=off go mod tidy.
package certmanager

import _ "github.com/cert-manager/cert-manager/pkg/apis"
