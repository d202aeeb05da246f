//go:build tools

// Package localpath pins rancher's local-path-provisioner, the
// provisioner many small clusters use (it makes a directory on the node
// for each claim), which make e2e-perf runs beside pillar-csi and the
// floor driver: it builds github.com/rancher/local-path-provisioner from
// the Go module proxy into bin/local-path-provisioner. A module of its
// own so that its build list is upstream's and does not move the tools
// module's.
package localpath

import _ "github.com/rancher/local-path-provisioner"
