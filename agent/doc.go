// Package agent implements pillar-agent, the gRPC server that runs on every
// storage node. It owns all nvmet configfs writes on its host, drives the
// ZFS and LVM backends, and checks and advances the durable fencing marks
// before any call changes a volume.
//
// Layout:
//   - server: the pillar.agent.v1.AgentService implementation — fencing,
//     per-volume serialization (api/keylock, waiting within the caller's
//     deadline), the backends per store, nvmet exports,
//     Reconcile and the mapping of every failure to a gRPC code. It has no
//     transport of its own: Register it on any grpc.ServiceRegistrar.
//   - app: the process around it — flags, gRPC server, TLS, health,
//     metrics, logging, graceful shutdown; cmd/pillar-agent is its main.
//     Its flag names, log flags and call records (api/logging) are the
//     ones pillar-controller and pillar-node use.
//
// "server" is the service here, as CSI calls a service implementation a
// server; the gRPC transport is app's. In the csidriver module the
// transport is package endpoint.
//   - marks: "pillar-agent marks", the operator's command that lists and
//     repairs the fencing marks (documented in app, "Fencing marks").
//
// The real-kernel suite of the service, with its benchmarks, is
// tests/kernel/agent.
//
// Allowed dependencies: the Go standard library, golang.org/x/sys,
// google.golang.org/grpc, github.com/prometheus/client_golang (metrics),
// github.com/google/renameio/v2, github.com/hashicorp/go-multierror, and
// the pillar-csi modules api, fencing, configfs and backends. No Kubernetes client: the agent learns
// everything it needs from the controller's requests.
package agent
