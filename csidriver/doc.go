// Package csidriver implements the Container Storage Interface services of
// pillar-csi: the Identity service, the Controller service run by
// pillar-controller, and the Node service run by pillar-node on every worker
// (NVMe-oF/TCP connect, mkfs, mount and bind mount, expand, stats).
//
// Layout:
//
//   - driver: the driver name (pillar-csi.io) and version, shared by every
//     service.
//   - identity: the Identity service; Probe runs the serving binary's
//     readiness check.
//   - node: the Node service (pillar-node); its package documentation lists
//     the kernel and initiator behaviour it handles.
//   - endpoint: the gRPC transport of the CSI services — listening on the
//     CSI endpoint, the gRPC server with the shared logging interceptor
//     (api/logging), graceful stop. It implements no service.
//   - reconcile: pillar-controller's reconcilers of the configuration
//     CRDs (PillarAgent, PillarStore, PillarProtocol, PillarStorageClass)
//     and the Connector that reaches an agent; the RBAC they need is
//     generated from their markers into config/rbac (make generate).
//   - controller: the CSI Controller service over PillarVolumeState
//     (record first, resumable steps, fencing tokens by compare-and-swap,
//     exclusive publications), served by pillar-controller next to the
//     reconcilers and sharing their Connector.
//   - controllerapp: pillar-controller's manager: leader election on a
//     Lease, health and readiness, one /metrics; its tests run it against a
//     real kube-apiserver under the generated RBAC, on the current and the
//     oldest supported Kubernetes.
//   - registration: pillar-node's registration with kubelet (the
//     plugin Registration service on <plugins_registry>/pillar-csi.io-reg.sock,
//     kept in place while pillar-node runs); its package documentation
//     says what kubelet does with it.
//   - cmd/pillar-node, cmd/pillar-controller: the binaries. Their flags
//     name a setting as every pillar-csi binary does (-csi-endpoint,
//     -shutdown-grace-period, -health-address, -metrics-address,
//     -node-name, -log-level and -log-format from api/logging); old names
//     stay for one release as deprecated aliases (api/flagalias). Neither
//     needs node-driver-registrar or livenessprobe: pillar-node registers itself
//     (-kubelet-registration-path, -plugin-registration-dir) and serves
//     /healthz and /readyz itself (-health-address, :9441), both backed by
//     the Identity service's Probe; pillar-controller's /healthz and
//     /readyz (:9431) call Probe on its own CSI endpoint.
//   - internal/agentclient (one gRPC connection per agent: deadlines,
//     keepalives, health watch, TLS from a Secret), internal/fakeagent (an
//     in-process agent for the controller's tests), internal/envtestsuite
//     (the API server of those tests and benchmarks), internal/nvmeof
//     (initiator through /dev/nvme-fabrics and sysfs), internal/stage
//     (atomic stage records). External commands run
//     through the backends module's command runner (deadline, LC_ALL=C,
//     process-group kill, exit code and stderr in the error), the same
//     one pillar-agent uses for zfs and lvm.
//
// "controller" names one thing here: pillar-controller. Package
// controller is its CSI Controller service; controllerapp is the process
// that runs that service next to the reconcilers (package reconcile).
// Each service serializes the calls for one volume with api/keylock.
//
// The node⇄controller contract (volume context keys, node ID
// format) lives in api/export.
//
// csi-sanity runs against this module in go test: every spec in package
// node, with pillar-node's Node service (its kernel fakes) and the real
// Controller service on a real API server; the Controller and Identity
// specs alone in package controller, also on the oldest supported API
// server. In the kernel lab it runs against the real stack too
// (tests/kernel/controller): the pillar-controller binary for Identity and
// Controller, the pillar-node binary for Node, on ZFS and on LVM thin.
//
// Allowed dependencies: the Go standard library, golang.org/x/sys,
// github.com/container-storage-interface/spec, google.golang.org/grpc,
// sigs.k8s.io/controller-runtime and the Kubernetes client libraries
// (with their logr, klog and Prometheus client),
// k8s.io/mount-utils, k8s.io/kubelet (the plugin registration API only),
// github.com/google/renameio/v2, github.com/fsnotify/fsnotify (tests
// only, to watch the registration directory as kubelet does),
// github.com/hashicorp/go-multierror, and the pillar-csi modules api,
// fencing and backends (its command runner). Never another module's internal packages.
package csidriver
