// Package v1alpha1 holds the cluster-scoped custom resources of pillar-csi,
// API group pillar-csi.io, version v1alpha1.
//
// Operators write four of them:
//
//   - PillarAgent says where a pillar-agent runs (node and/or address, port,
//     optional mTLS).
//   - PillarStore is a storage pool served by one agent: a ZFS pool (and
//     parent dataset) or an LVM volume group (and optional thin pool).
//   - PillarProtocol says how volumes are exported: for NVMe-oF/TCP the
//     bind address, port, host ACLs and the initiator's connect tuning.
//   - PillarStorageClass joins a store and a protocol; the controller keeps a
//     Kubernetes StorageClass of the same name in sync with it.
//
// The controller writes the fifth, PillarVolumeState, the durable record of
// one volume: provisioning progress, the export spec, every publication and
// the publicationGeneration that, with the object's UID, forms the fencing
// token of every agent call for that volume.
//
// Validation lives in the schema (OpenAPI and CEL rules generated from the
// markers in this package), so a bad object is refused by the API server with
// a readable message before any controller sees it. Fields whose change
// would orphan data on a storage node (the store a volume lives on, its ZFS
// pool or volume group, the NQN it is exported under) are immutable.
//
// The CEL rules use only what Kubernetes 1.25 offers (the first release
// that enforces CRD validation rules by default): no isIP() or quantity
// functions, no messageExpression, reason or fieldPath, any of which would
// make the CRDs fail to install, or fail strict validation, on older API
// servers. On 1.24 the OpenAPI checks (types, ranges, enums, lengths,
// defaults) still apply but the CEL rules are not enforced. A rule on an
// object (rather than on a field) names its field in its message.
//
// +kubebuilder:object:generate=true
// +groupName=pillar-csi.io
package v1alpha1
