// Package api is the root of pillar-csi's contracts between components.
// Anything two modules must agree on lives in this module, never in a
// module's internal packages:
//
//   - v1alpha1: the cluster-scoped custom resources of group pillar-csi.io
//     (PillarAgent, PillarStore, PillarProtocol, PillarStorageClass and the
//     internal PillarVolumeState), with generated deep-copy code; the CRD
//     manifests generated from them are in config/crd.
//   - agent/v1: the gRPC API pillar-controller uses to drive pillar-agent,
//     generated from agent.proto, with the FencingToken every mutating call
//     carries and the compatibility policy (agent/v1/COMPATIBILITY.md).
//   - export: how the NQN, namespace ID, UUID and NGUID of a volume's
//     NVMe-oF export derive from its volume ID, so the agent that creates an
//     export and the node that looks for its device agree without talking.
//   - keylock: the per-volume lock of every service (pillar-controller's
//     and pillar-node's CSI services, pillar-agent): one operation per
//     volume, a try-lock that names the holder and a waiting lock bound by
//     the caller's context. It is here, not in fencing or configfs, because
//     api is the one module both csidriver and agent require.
//   - logging: the one log record shape of the three binaries: the shared
//     -log-level and -log-format flags, the logger built from them, and the
//     gRPC interceptor that logs every call (method, code,
//     duration_seconds, peer, volume_id) without its request.
//   - flagalias: an old flag name kept for one release as a deprecated
//     alias of the name all three binaries now share for that setting.
//   - metricsdoc: the reference of a binary's Prometheus metrics
//     (docs/reference/), written from the collectors it registers by the
//     generators of pillar-agent and pillar-controller.
//
// `go generate ./...` in this directory (make generate) regenerates the
// deep-copy code, the CRDs and the protobuf code with the pinned tools of
// the repository's bin/ directory (controller-gen, buf, protoc-gen-go,
// protoc-gen-go-grpc).
//
// Dependencies of the packages (tests need more): the Go standard library,
// k8s.io/apimachinery for the resource types, google.golang.org/grpc and
// google.golang.org/protobuf for the agent API. The export, keylock
// and flagalias packages need only the standard library, logging only
// grpc besides, metricsdoc only Prometheus' client_golang and
// client_model. api depends on no other pillar-csi module.
package api
