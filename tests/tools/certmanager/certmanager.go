// Package certmanager pins the cert-manager release whose CRDs the chart's
// tests install (deploy/crds/ of github.com/cert-manager/cert-manager)
// before they dry-run the chart's cert-manager mode against kube-apiserver.
// The blank import of a package without imports keeps the module in go.sum
// (with the hash of its zip) while pulling in none of its dependencies.
//
// To move to another release: GOWORK=off go get
// github.com/cert-manager/cert-manager@vX.Y.Z && GOWORK=off go mod tidy.
package certmanager

import _ "github.com/cert-manager/cert-manager/pkg/apis"
