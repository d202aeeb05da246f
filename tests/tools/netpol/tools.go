//go:build tools

// Package netpol pins kube-network-policies, the NetworkPolicy
// implementation the lab cluster runs when a test needs NetworkPolicy
// enforced (the lab's bridge CNI enforces none): make e2e-two builds
// sigs.k8s.io/kube-network-policies/cmd from the Go module proxy into
// bin/kube-network-policies. It is a
// module of its own so that its build list is upstream's and does not
// move the tools module's.
package netpol

import _ "sigs.k8s.io/kube-network-policies/cmd"
