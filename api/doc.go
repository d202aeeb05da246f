// Package api is the root of pillar-csi's contracts between components.
//
// The module holds the cluster-scoped Pillar* custom resource types (group
// pillar-csi.io) with their generated deep-copy code and CRD manifests, and
// the gRPC API that pillar-controller uses to talk to pillar-agent, including
// the fencing-token message every mutating call carries. Anything two
// modules must agree on lives here, never in a module's internal packages.
//
// Allowed dependencies: the Go standard library, the Kubernetes API machinery
// needed for CRD types (k8s.io/apimachinery, sigs.k8s.io/controller-runtime
// for scheme registration), google.golang.org/grpc and
// google.golang.org/protobuf. No module of this repository depends on api's
// users; api depends on no other pillar-csi module.
package api
