package v1alpha1

// Reasons of the conditions pillar-controller sets and of the events it
// records. Each is a CamelCase word that `kubectl describe` and `kubectl get
// events` show; the reference in docs/reference/reasons.md is generated from
// this file (`make generate`), a constant's comment becoming its meaning, so
// write each comment for an operator: what happened and what to do.
//
// A constant's group says where it appears. Conditions are Ready unless the
// group says otherwise; a Warning event with the same reason accompanies
// every change of a Ready condition to False, a Normal one every change to
// True.

// Ready reasons of PillarAgent.
const (
	// ReasonAgentReady: the agent answers at its address with the
	// installation's token (and TLS identity) and can export over
	// NVMe-oF/TCP.
	ReasonAgentReady = "AgentReady"
	// ReasonUnreachable: no answer from the agent's address. Check that
	// pillar-agent runs on the node, and the address and port.
	ReasonUnreachable = "Unreachable"
	// ReasonTLSFailed: the TLS handshake with the agent failed. Check that
	// the agent's certificate is signed by the CA the controller trusts and
	// carries the name it dials, and that the agent trusts the controller's
	// certificate.
	ReasonTLSFailed = "TLSFailed"
	// ReasonUnauthenticated: the agent refuses the controller's token. The
	// controller's agent token file and the agents' token directory must
	// come from the same Secret.
	ReasonUnauthenticated = "Unauthenticated"
	// ReasonNotServing: the agent answers but is not ready (its health
	// service says NOT_SERVING). Its log and /readyz say why.
	ReasonNotServing = "NotServing"
	// ReasonNvmetMissing: the storage node cannot export: load nvmet and
	// nvmet_tcp and mount configfs.
	ReasonNvmetMissing = "NvmetMissing"
	// ReasonNodeMismatch: the agent at spec.address runs on another node
	// than spec.nodeName. Correct one of them.
	ReasonNodeMismatch = "NodeMismatch"
	// ReasonMarksStoreChanged: the agent's fencing marks store is not the
	// one the controller pinned: its marks were lost or replaced. Volumes
	// of the agent are refused until an operator accepts the new store
	// (docs/troubleshooting.md, MarksStoreChanged).
	ReasonMarksStoreChanged = "MarksStoreChanged"
	// ReasonNodeNotFound: spec.nodeName names a Node that does not exist.
	ReasonNodeNotFound = "NodeNotFound"
	// ReasonNodeUnavailable: the Node of spec.nodeName could not be read.
	ReasonNodeUnavailable = "NodeUnavailable"
	// ReasonNodeAddressMissing: the Node of spec.nodeName reports no
	// InternalIP: set spec.address.
	ReasonNodeAddressMissing = "NodeAddressMissing"
	// ReasonTLSSecretNotAllowed: the TLS Secret is in a namespace the
	// controller was not given (-tls-secret-namespaces).
	ReasonTLSSecretNotAllowed = "TLSSecretNotAllowed"
	// ReasonTLSSecretMissing: the TLS Secret does not exist.
	ReasonTLSSecretMissing = "TLSSecretMissing"
	// ReasonTLSSecretUnavailable: the TLS Secret could not be read.
	ReasonTLSSecretUnavailable = "TLSSecretUnavailable"
	// ReasonTLSSecretInvalid: the TLS Secret lacks tls.crt, tls.key or
	// ca.crt, or they do not parse.
	ReasonTLSSecretInvalid = "TLSSecretInvalid"
)

// Ready reasons of PillarStore.
const (
	// ReasonStoreAvailable: the agent reports the pool and its free space.
	ReasonStoreAvailable = "Available"
	// ReasonAgentNotFound: spec.agentName names no PillarAgent.
	ReasonAgentNotFound = "AgentNotFound"
	// ReasonAgentNotReady: the store's PillarAgent is not ready (its own
	// condition says why) or has not been reached yet.
	ReasonAgentNotReady = "AgentNotReady"
	// ReasonPoolMissing: the ZFS dataset or LVM volume group (and thin
	// pool) does not exist on the storage node.
	ReasonPoolMissing = "PoolMissing"
	// ReasonBackendToolsMissing: the storage node lacks the zfs or lvm
	// tools or the kernel module.
	ReasonBackendToolsMissing = "BackendToolsMissing"
	// ReasonCapacityFailed: the agent could not report the pool's capacity.
	ReasonCapacityFailed = "CapacityFailed"
	// ReasonThinPoolNotZeroing: the LVM thin pool does not zero new
	// blocks, so a new volume could read another's data. Run `lvchange
	// --zero y` on the pool, or set spec.lvm.allowUnzeroedThinPool if that
	// is acceptable.
	ReasonThinPoolNotZeroing = "ThinPoolNotZeroing"
)

// Ready reasons of PillarProtocol.
const (
	// ReasonProtocolAccepted: the protocol's spec is valid; the agents
	// export on its address and port.
	ReasonProtocolAccepted = "Accepted"
)

// Ready reasons of PillarStorageClass.
const (
	// ReasonInSync: the StorageClass exists as the PillarStorageClass
	// says, and its store and protocol are ready.
	ReasonInSync = "InSync"
	// ReasonConflict: a StorageClass of that name exists and was not
	// created by this PillarStorageClass; it is never taken over.
	ReasonConflict = "Conflict"
	// ReasonStoreNotFound: spec.storeName names no PillarStore.
	ReasonStoreNotFound = "StoreNotFound"
	// ReasonStoreNotReady: the PillarStore is not ready or not reconciled
	// yet.
	ReasonStoreNotReady = "StoreNotReady"
	// ReasonProtocolNotFound: spec.protocolName names no PillarProtocol.
	ReasonProtocolNotFound = "ProtocolNotFound"
	// ReasonProtocolNotReady: the PillarProtocol is not ready or not
	// reconciled yet.
	ReasonProtocolNotReady = "ProtocolNotReady"
	// ReasonStorageClassError: the StorageClass could not be created.
	ReasonStorageClassError = "StorageClassError"
)

// Ready reasons shared by the configuration objects (PillarAgent,
// PillarStore, PillarProtocol, PillarStorageClass).
const (
	// ReasonInvalidSpec: the spec is inconsistent in a way the schema
	// cannot say (the message names the field), or the agent refuses it.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonUpdateFailed: the accepted spec could not be recorded; the
	// controller tries again.
	ReasonUpdateFailed = "UpdateFailed"
	// ReasonImmutableFieldChanged: a field that cannot change was changed
	// on an API server that does not enforce the CRD's validation rules.
	// Change it back, or create a new object; until then the controller
	// does not act on this one.
	ReasonImmutableFieldChanged = "ImmutableFieldChanged"
	// ReasonDeletionWaitsForVolumes: the object is being deleted, and
	// volumes still live on it (the message names them). Delete their
	// claims; a PersistentVolume with reclaim policy Retain keeps its
	// volume until its policy is Delete.
	ReasonDeletionWaitsForVolumes = "DeletionWaitsForVolumes"
)

// Ready reasons of PillarVolumeState, each the last step it recorded.
const (
	// ReasonBackendCreated: the backend volume exists; the export follows.
	ReasonBackendCreated = "BackendCreated"
	// ReasonExported: the volume is provisioned and exported.
	ReasonExported = "Exported"
	// ReasonExpanded: the volume was expanded.
	ReasonExpanded = "Expanded"
	// ReasonUnexported: the volume is being deleted and its export is gone.
	//
	// Deprecated: no longer written; DeleteVolume removes the export and
	// the volume in one agent call.
	ReasonUnexported = "Unexported"
)

// The Ready reason of PillarSnapshotState, and events on the record. Until
// the snapshot is taken the record has no Ready condition; a failed
// CreateSnapshot says why in status.lastFailure.
const (
	// ReasonSnapshotTaken: the agent confirmed the snapshot; it can be
	// restored from.
	ReasonSnapshotTaken = "SnapshotTaken"
	// ReasonSnapshotAbandoned (Warning): a CreateSnapshot never
	// completed and its VolumeSnapshotContent is gone, so no CO will ever
	// delete it: the snapshot is rolled back.
	ReasonSnapshotAbandoned = "SnapshotAbandoned"
)

// Reasons of PillarVolumeState's ExportSpecMissing condition, and events
// of the same reasons on the record.
const (
	// ReasonExportSpecMissing: the record has no spec.export (a volume of
	// a release that did not record it); the volume waits for an operator
	// (docs/troubleshooting.md#recovery-procedure).
	ReasonExportSpecMissing = "ExportSpecMissing"
	// ReasonExportSpecStated: spec.export is recorded; the volume resumes.
	ReasonExportSpecStated = "ExportSpecStated"
)

// Events on a PillarVolumeState and on its PersistentVolumeClaim.
const (
	// ReasonProvisioned (Normal): the volume was created and exported.
	ReasonProvisioned = "Provisioned"
	// ReasonPublished (Normal): a node was granted the volume.
	ReasonPublished = "Published"
	// ReasonUnpublished (Normal): nodes lost their grant of the volume.
	ReasonUnpublished = "Unpublished"
	// ReasonFencingRefused (Warning): the agent refused a call as stale: a
	// newer controller or call owns the volume. The controller re-reads the
	// record and retries; it persists only if a stale controller runs.
	ReasonFencingRefused = "FencingRefused"
	// ReasonProvisioningAbandoned (Warning): a CreateVolume never completed
	// and its claim is gone: the volume is rolled back.
	ReasonProvisioningAbandoned = "ProvisioningAbandoned"
)

// Events on a PillarAgent.
const (
	// ReasonExportsPushed (Normal): after an agent's restart the controller
	// pushed the exports its records state.
	ReasonExportsPushed = "ExportsPushed"
	// ReasonExportsNotRestored (Warning): some exports could not be pushed
	// back; the message names them, and the controller retries.
	ReasonExportsNotRestored = "ExportsNotRestored"
	// ReasonExportsRetained (Warning): the agent keeps pillar-csi
	// subsystems that no PillarVolumeState names (the message lists them).
	// If their volumes are gone, delete the subsystems on the storage node.
	ReasonExportsRetained = "ExportsRetained"
	// ReasonExportsRestored (Warning): pillar-agent put back exports that
	// something else on the storage node removed from nvmet (nvmetcli
	// clear, another tool): find what manages nvmet there.
	ReasonExportsRestored = "ExportsRestored"
	// ReasonMarksStoreAccepted (Warning): an operator accepted a new
	// fencing marks store for the agent.
	ReasonMarksStoreAccepted = "MarksStoreAccepted"
	// ReasonNodeRebooted (Warning): the storage node booted since it was
	// last seen; its exports are pushed back.
	ReasonNodeRebooted = "NodeRebooted"
	// ReasonAgentRestarted (Normal): pillar-agent restarted on the same
	// boot of its node.
	ReasonAgentRestarted = "AgentRestarted"
)

// Events on a PillarStorageClass.
const (
	// ReasonStorageClassCreated (Normal): the StorageClass was created.
	ReasonStorageClassCreated = "StorageClassCreated"
	// ReasonStorageClassRecreated (Warning): someone else deleted the
	// StorageClass; it was created again.
	ReasonStorageClassRecreated = "StorageClassRecreated"
	// ReasonStorageClassUpdated (Normal): the StorageClass's
	// allowVolumeExpansion, mountOptions or labels were updated to match
	// the spec.
	ReasonStorageClassUpdated = "StorageClassUpdated"
	// ReasonStorageClassDeleted (Normal): the StorageClass was deleted with
	// its PillarStorageClass.
	ReasonStorageClassDeleted = "StorageClassDeleted"
)
