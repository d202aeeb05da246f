//go:build tools

// Package registry pins the CNCF distribution registry that the lab
// cluster runs as its private registry (make registry builds
// github.com/distribution/distribution/v3/cmd/registry from the Go module
// proxy). It is a module of its own so that the registry's build list is
// upstream's and does not move the tools module's.
package registry

import _ "github.com/distribution/distribution/v3/cmd/registry"
