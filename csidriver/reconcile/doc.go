// Package reconcile holds pillar-controller's reconcilers of the
// configuration CRDs. Each keeps one object's status true to what it
// observes, sets a Ready condition whose reason says what is wrong and
// whose message says what to do, writes the status only when it changed
// (nothing at rest), and records an event on every Ready transition, so
// `kubectl describe` tells the story.
//
// # PillarAgent
//
// The agent is dialed at spec.address, else at the InternalIP of the Node
// spec.nodeName, on spec.port (9420). Ready reasons: AgentReady;
// InvalidSpec; NodeNotFound, NodeAddressMissing (the address cannot be
// found); TLSSecretMissing, TLSSecretInvalid (naming the Secret key),
// TLSSecretUnavailable; Unreachable, TLSFailed (the call failed);
// NodeMismatch (the agent at that address runs on another node);
// NotServing (its health service says not ready); NvmetMissing (nvmet_tcp
// or configfs absent on the node); ImmutableFieldChanged. The health watch
// of the agent's connection wakes the reconciler when the agent goes or
// comes back, so a loss shows within seconds (about 30 s when the node
// goes silent: the connection's keepalive); otherwise a Ready agent is
// asked again every AgentRefresh, a failing one with a backoff of 1 s
// doubling to 5 minutes.
//
// Every GetAgentInfo answer carries the agent's instance ID (new on every
// process start) and the node's boot ID. A new instance is recorded in
// status (instanceID, bootID, lastRestartTime), announced with an
// AgentRestarted or NodeRebooted event and handed to OnRestart, after
// which the desired exports of the agent's volumes must be pushed back.
//
// # PillarStore
//
// Capacity comes from the store's agent (GetCapacity with the store's
// whole configuration). Ready reasons: Available; AgentNotFound,
// AgentNotReady; PoolMissing (FAILED_PRECONDITION from the agent: the pool,
// volume group or thin pool does not exist); ThinPoolNotZeroing
// (FAILED_PRECONDITION with the StoreRefusal detail: the LVM thin pool does
// not zero new chunks and spec.lvm.allowUnzeroedThinPool is false);
// BackendToolsMissing (UNIMPLEMENTED: zfs or lvm is not installed); InvalidSpec;
// CapacityFailed; ImmutableFieldChanged. Refreshed every StoreRefresh, when
// its agent's Ready changes, and a second after Controllers.StoreChanged
// (one refresh for the changes of that second).
//
// # PillarProtocol
//
// Checked beyond the schema (the rules an API server without CEL does not
// enforce, an address net/netip accepts without a zone); status lists the
// PillarStorageClasses that use it. Ready reasons: Accepted, InvalidSpec.
//
// # PillarStorageClass
//
// The StorageClass of the same name is generated (provisioner
// pillar-csi.io; parameters pillar-csi.io/store, pillar-csi.io/protocol,
// csi.storage.k8s.io/fstype; reclaim policy, binding mode, expansion,
// mount options), owned by the PillarStorageClass and labelled
// app.kubernetes.io/managed-by=pillar-controller. An edit of its mutable
// fields is put back (StorageClassUpdated), a deletion undone
// (StorageClassRecreated); one of the same name that it did not create is
// left alone (Conflict). The finalizer pillar-csi.io/storageclass deletes
// it with the PillarStorageClass. Ready reasons: InSync, Conflict,
// StoreNotFound, StoreNotReady, ProtocolNotFound, ProtocolNotReady,
// StorageClassError, ImmutableFieldChanged.
//
// # Kubernetes without CEL
//
// API servers before 1.25 drop the CRDs' CEL rules. The fields those rules
// freeze are recorded, on first sight, in the annotation
// pillar-csi.io/accepted-spec; a later change of one is refused with
// ImmutableFieldChanged (and an event) until it is undone. For a
// PillarStorageClass the generated StorageClass itself is the record.
package reconcile
