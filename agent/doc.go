// Package agent implements pillar-agent, the gRPC server that runs on every
// storage node. It owns all nvmet configfs writes on its host, drives the
// ZFS and LVM backends, and checks and advances the durable fencing marks
// before any call changes a volume.
//
// Allowed dependencies: the Go standard library, golang.org/x/sys,
// google.golang.org/grpc, github.com/google/renameio/v2,
// github.com/hashicorp/go-multierror, and the pillar-csi modules api,
// fencing, configfs and backends. No Kubernetes client: the agent learns
// everything it needs from the controller's requests.
package agent
