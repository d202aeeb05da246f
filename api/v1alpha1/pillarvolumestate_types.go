package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AccessMode is the CSI access mode a volume is published with.
// +kubebuilder:validation:Enum=ReadWriteOnce;ReadWriteOncePod;ReadOnlyMany;ReadWriteMany
type AccessMode string

const (
	// AccessReadWriteOnce is CSI SINGLE_NODE_WRITER (and
	// SINGLE_NODE_MULTI_WRITER): one node reads and writes.
	AccessReadWriteOnce AccessMode = "ReadWriteOnce"
	// AccessReadWriteOncePod is CSI SINGLE_NODE_SINGLE_WRITER: one pod on
	// one node reads and writes.
	AccessReadWriteOncePod AccessMode = "ReadWriteOncePod"
	// AccessReadOnlyMany is CSI MULTI_NODE_READER_ONLY: any number of nodes
	// read.
	AccessReadOnlyMany AccessMode = "ReadOnlyMany"
	// AccessReadWriteMany is CSI MULTI_NODE_MULTI_WRITER: any number of
	// nodes read and write a raw block volume (live migration of a virtual
	// machine's disk). Only Block volumes of a PillarStorageClass with
	// multiNodeBlockWriters have it; the application coordinates the
	// writes, as on any shared disk.
	AccessReadWriteMany AccessMode = "ReadWriteMany"
)

// PillarVolumeStateSpec is the durable record of one volume. The controller
// writes it; operators edit it only to recover a volume (see
// ConditionExportSpecMissing).
//
// The fencing token of every agent call for this volume is the object's UID
// (the volume's lifecycle) together with publicationGeneration, which the
// controller increments with a compare-and-swap on the object's
// resourceVersion before each publication change.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.protocolName) || (has(self.protocolName) && self.protocolName == oldSelf.protocolName)",message="protocolName cannot be changed or removed once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.storeUID) || (has(self.storeUID) && self.storeUID == oldSelf.storeUID)",message="storeUID cannot be changed or removed once set: it names the store the volume's data lives in"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.export) || has(self.export)",message="export cannot be removed once recorded: the storage node would keep an export nothing tracks"
// +kubebuilder:validation:XValidation:rule="has(self.dataSource) == has(oldSelf.dataSource)",message="dataSource cannot be added or removed: it says what the volume was made from"
// +kubebuilder:validation:XValidation:rule="!has(self.publications) || size(self.publications) <= 1 || self.publications.all(p, p.accessMode == 'ReadOnlyMany') || self.publications.all(p, p.accessMode == 'ReadWriteMany')",message="a ReadWriteOnce or ReadWriteOncePod publication excludes every other publication, and ReadOnlyMany and ReadWriteMany ones do not mix: the volume can be published read-write to one node only, unless every publication is ReadWriteMany"
// +kubebuilder:validation:XValidation:rule="!has(self.publications) || self.multiNodeBlockWriters || self.publications.all(p, p.accessMode != 'ReadWriteMany')",message="a ReadWriteMany publication needs multiNodeBlockWriters: the volume's class did not allow writers on several nodes"
type PillarVolumeStateSpec struct {
	// VolumeID is the CSI volume ID, equal to this object's name. It cannot
	// change.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')`,message="must be a pillar-csi volume ID: at most 128 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeID cannot be changed"
	VolumeID string `json:"volumeID"`

	// StoreName is the PillarStore the volume lives in. It cannot change:
	// the data is there.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storeName cannot be changed: the volume's data lives in that store"
	StoreName ObjectName `json:"storeName"`

	// StoreUID is the UID of the PillarStore the volume was created in. A
	// PillarStore deleted (its in-use finalizer removed by hand) and created
	// again under the same name is another store, perhaps on another pool
	// or node: the controller refuses to act on this volume through it
	// (FailedPrecondition), since a DeleteVolume there would find nothing
	// and leave the data behind, until the new store is annotated
	// pillar-csi.io/adopt-store-uid with this UID. Absent on volumes
	// created before it was recorded (they are matched by name); once set
	// it cannot change.
	// +optional
	StoreUID types.UID `json:"storeUID,omitempty"`

	// ProtocolName is the PillarProtocol the export was made from. Absent on
	// volumes created before it was recorded; once set it cannot change.
	// +optional
	ProtocolName ObjectName `json:"protocolName,omitempty"`

	// CapacityBytes is the size the volume was created with or last
	// expanded to. It can grow, never shrink.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="capacityBytes cannot shrink: volumes can only be expanded"
	CapacityBytes int64 `json:"capacityBytes"`

	// MultiNodeBlockWriters records that the volume's PillarStorageClass
	// allowed writers on several nodes (multiNodeBlockWriters): only then
	// may the volume be published ReadWriteMany, and only as a raw block
	// device. It cannot change.
	// +optional
	// +kubebuilder:default=false
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="multiNodeBlockWriters cannot be changed: it is the volume's class's choice"
	MultiNodeBlockWriters bool `json:"multiNodeBlockWriters,omitempty"`

	// DataSource is what the volume was made from: a snapshot, or another
	// volume (a clone). Absent for a volume made empty. It cannot change.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="dataSource cannot be changed"
	DataSource *VolumeDataSource `json:"dataSource,omitempty"`

	// Export is how the volume is exported. Its absence is the
	// ExportSpecMissing condition: the controller does not guess it, the
	// operator states it. Once recorded it cannot be removed.
	// +optional
	Export *ExportSpec `json:"export,omitempty"`

	// Publications are the nodes the volume is published to, one entry per
	// node. A ReadWriteOnce or ReadWriteOncePod publication excludes every
	// other one.
	// +optional
	// +listType=map
	// +listMapKey=nodeID
	// +kubebuilder:validation:MaxItems=1024
	Publications []Publication `json:"publications,omitempty"`

	// PublicationGeneration is the generation half of the fencing token. The
	// controller increments it with a compare-and-swap (an update carrying
	// the resourceVersion it read) before it changes publications or calls
	// the agent, so two controllers can never issue the same generation. It
	// never decreases.
	//
	// It is always serialized and defaults to 0, so that removing it cannot
	// slip past the rule that it never decreases.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="publicationGeneration cannot decrease: agents reject tokens older than the newest they have seen"
	PublicationGeneration int64 `json:"publicationGeneration"`
}

// VolumeDataSource names what a volume was made from: exactly one of a
// snapshot and a volume, in the volume's store.
//
// +kubebuilder:validation:XValidation:rule="has(self.snapshotID) != has(self.volumeID)",message="exactly one of snapshotID and volumeID"
type VolumeDataSource struct {
	// SnapshotID is the snapshot the volume was restored from.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	SnapshotID string `json:"snapshotID,omitempty"`

	// VolumeID is the volume it was cloned from.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	VolumeID string `json:"volumeID,omitempty"`
}

// ExportSpec is the NVMe-oF/TCP export of one volume: one subsystem with
// one namespace, reachable on an nvmet port.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.subsystemNQN) || (has(self.subsystemNQN) && self.subsystemNQN == oldSelf.subsystemNQN)",message="subsystemNQN cannot be changed or removed once set: the storage node's subsystem and every connected initiator use it"
// +kubebuilder:validation:XValidation:rule="!oldSelf.aclEnabled || self.aclEnabled",message="aclEnabled cannot go from true to false: it would open the volume's subsystem to every host that reaches the port"
type ExportSpec struct {
	// BindAddress is the address of the nvmet port (addr_traddr).
	// +required
	BindAddress IPAddress `json:"bindAddress"`

	// Port is the TCP port of the nvmet port (addr_trsvcid). No default: an
	// export spec is stated, never guessed.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// ACLEnabled restricts the subsystem to the host NQNs of the
	// publications (allowed_hosts) instead of allow_any_host. No default:
	// an export spec is stated, never guessed. It may go from false to
	// true, never back.
	// +required
	ACLEnabled *bool `json:"aclEnabled"`

	// SubsystemNQN is the NQN of the volume's subsystem. When empty it is
	// the one the api/export package derives from the volume ID. Once set
	// it cannot change or be removed.
	// +optional
	SubsystemNQN NQN `json:"subsystemNQN,omitempty"`
}

// Publication is the volume's attachment to one node.
type Publication struct {
	// NodeID is the CSI node ID (the node's name) the volume is published
	// to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	NodeID string `json:"nodeID"`

	// HostNQN is the node's NVMe host NQN; with aclEnabled it is the only
	// host allowed to connect.
	// +required
	HostNQN NQN `json:"hostNQN"`

	// AccessMode is the CSI access mode of the publication.
	// +required
	AccessMode AccessMode `json:"accessMode"`

	// ReadOnly is true when the CO asked for a read-only publication.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// PillarVolumeStateStatus records provisioning progress, so a CreateVolume
// or DeleteVolume that failed half-way is resumed (or rolled back) by the
// next attempt instead of leaving orphans.
type PillarVolumeStateStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// BackendCreated is true once the agent confirmed the zvol or logical
	// volume exists, and false again once it confirmed its deletion.
	// +optional
	BackendCreated bool `json:"backendCreated,omitempty"`

	// Exported is true once the agent confirmed the export exists, and
	// false again once it confirmed its removal.
	// +optional
	Exported bool `json:"exported,omitempty"`

	// CapacityBytes is the size of the backend volume as the agent last
	// reported it; below spec.capacityBytes while an expansion is pending.
	// +optional
	CapacityBytes int64 `json:"capacityBytes,omitempty"`

	// Conditions: Ready (provisioned and exported) and ExportSpecMissing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastFailure is the last CSI call on the volume that failed, kept
	// until a call of the same operation succeeds: what a claim stuck
	// Pending, a pod stuck ContainerCreating or a claim stuck Terminating
	// is waiting for, in `kubectl get pvstate`.
	// +optional
	LastFailure *OperationFailure `json:"lastFailure,omitempty"`
}

// OperationFailure is one failed CSI call.
type OperationFailure struct {
	// Operation is the CSI call: CreateVolume, DeleteVolume,
	// ControllerPublishVolume, ControllerUnpublishVolume or
	// ControllerExpandVolume on a volume; CreateSnapshot or DeleteSnapshot
	// on a snapshot.
	// +kubebuilder:validation:MaxLength=64
	Operation string `json:"operation"`

	// Code is the gRPC status code it returned, e.g. Unavailable.
	// +kubebuilder:validation:MaxLength=32
	Code string `json:"code"`

	// Message is the error it returned, cut to 1024 bytes.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`

	// Time is when it returned.
	Time metav1.Time `json:"time"`
}

// Annotations of a PillarVolumeState that name what Kubernetes objects it
// was created for, when the provisioner says (--extra-create-metadata).
const (
	// AnnotationPVCName is the claim's name.
	AnnotationPVCName = "pillar-csi.io/pvc-name"
	// AnnotationPVCNamespace is the claim's namespace.
	AnnotationPVCNamespace = "pillar-csi.io/pvc-namespace"
	// AnnotationPVName is the PersistentVolume's name.
	AnnotationPVName = "pillar-csi.io/pv-name"
)

// PillarVolumeState is pillar-csi's internal, durable record of one volume:
// provisioning progress, export spec, publications and the fencing
// generation. Its name is the CSI volume ID and its UID is the volume's
// lifecycle identity in fencing tokens.
//
// It is not in the "pillar" category of the objects an operator declares:
// `kubectl delete pillar --all` must not condemn every volume. Its own
// category is pillar-volumes (`kubectl get pillar-volumes`).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=pvstate,categories=pillar-volumes
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.volumeID",message="metadata.name must equal spec.volumeID: there is exactly one PillarVolumeState per volume"
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.spec.storeName`
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.spec.protocolName`,priority=1
// +kubebuilder:printcolumn:name="Capacity",type=integer,format=int64,JSONPath=`.spec.capacityBytes`
// +kubebuilder:printcolumn:name="Generation",type=integer,format=int64,JSONPath=`.spec.publicationGeneration`
// +kubebuilder:printcolumn:name="Nodes",type=string,JSONPath=`.spec.publications[*].nodeID`
// +kubebuilder:printcolumn:name="Multi-Writers",type=boolean,JSONPath=`.spec.multiNodeBlockWriters`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Export-Missing",type=string,JSONPath=`.status.conditions[?(@.type=="ExportSpecMissing")].status`,priority=1
// +kubebuilder:printcolumn:name="Claim-Namespace",type=string,JSONPath=`.metadata.annotations.pillar-csi\.io/pvc-namespace`
// +kubebuilder:printcolumn:name="Claim",type=string,JSONPath=`.metadata.annotations.pillar-csi\.io/pvc-name`
// +kubebuilder:printcolumn:name="Failed",type=string,JSONPath=`.status.lastFailure.operation`
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.lastFailure.code`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.lastFailure.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PillarVolumeState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the volume's durable record.
	// +required
	Spec PillarVolumeStateSpec `json:"spec"`

	// Status is provisioning progress and conditions.
	// +optional
	Status PillarVolumeStateStatus `json:"status,omitempty"`
}

// PillarVolumeStateList is a list of PillarVolumeStates.
//
// +kubebuilder:object:root=true
type PillarVolumeStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PillarVolumeState `json:"items"`
}
