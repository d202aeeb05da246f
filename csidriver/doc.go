// Package csidriver implements the Container Storage Interface services of
// pillar-csi: the Identity service, the Controller service run by
// pillar-controller, and the Node service run by pillar-node on every worker
// (NVMe-oF/TCP connect, mkfs, mount and bind mount, expand, stats).
//
// csi-sanity runs against this module, in-process with fakes and against
// the real stack.
//
// Allowed dependencies: the Go standard library, golang.org/x/sys,
// github.com/container-storage-interface/spec, google.golang.org/grpc,
// sigs.k8s.io/controller-runtime and the Kubernetes client libraries,
// k8s.io/mount-utils, github.com/google/renameio/v2,
// github.com/hashicorp/go-multierror, and the pillar-csi modules api and
// fencing. Never another module's internal packages.
package csidriver
