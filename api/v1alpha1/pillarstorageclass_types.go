package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FSType is the filesystem created on Filesystem-mode volumes.
// +kubebuilder:validation:Enum=ext4;xfs
type FSType string

const (
	// FSTypeExt4 is ext4.
	FSTypeExt4 FSType = "ext4"
	// FSTypeXFS is XFS (which refuses filesystems smaller than 300 MiB).
	FSTypeXFS FSType = "xfs"
)

// ReclaimPolicy is what happens to a volume when its claim is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type ReclaimPolicy string

const (
	// ReclaimDelete deletes the volume and its data.
	ReclaimDelete ReclaimPolicy = "Delete"
	// ReclaimRetain keeps the volume for manual recovery.
	ReclaimRetain ReclaimPolicy = "Retain"
)

// VolumeBindingMode is when volumes are provisioned.
// +kubebuilder:validation:Enum=Immediate;WaitForFirstConsumer
type VolumeBindingMode string

const (
	// BindingImmediate provisions as soon as the claim is created.
	BindingImmediate VolumeBindingMode = "Immediate"
	// BindingWaitForFirstConsumer provisions when a pod first uses the
	// claim.
	BindingWaitForFirstConsumer VolumeBindingMode = "WaitForFirstConsumer"
)

// Parameters of the StorageClass the controller generates from a
// PillarStorageClass. CreateVolume reads them back; the CSI external
// provisioner passes them through unchanged.
const (
	// StorageClassParamStore names the PillarStore new volumes are created
	// in.
	StorageClassParamStore = "pillar-csi.io/store"
	// StorageClassParamProtocol names the PillarProtocol new volumes are
	// exported with.
	StorageClassParamProtocol = "pillar-csi.io/protocol"
	// StorageClassParamFSType is the filesystem of Filesystem-mode volumes,
	// under the key the external provisioner and kubelet know.
	StorageClassParamFSType = "csi.storage.k8s.io/fstype"
	// StorageClassParamMultiNodeBlockWriters is "true" in the class of a
	// PillarStorageClass with multiNodeBlockWriters, and absent otherwise.
	StorageClassParamMultiNodeBlockWriters = "pillar-csi.io/multi-node-block-writers"
)

// PillarStorageClassSpec combines a store and a protocol. The controller
// keeps a Kubernetes StorageClass with the same name as this object in sync
// with it. Kubernetes forbids changing a StorageClass's parameters,
// reclaimPolicy and volumeBindingMode, so the fields that become those are
// immutable here too: create another PillarStorageClass instead.
type PillarStorageClassSpec struct {
	// StoreName is the PillarStore new volumes are created in.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storeName cannot be changed (StorageClass parameters are immutable): create another PillarStorageClass"
	StoreName ObjectName `json:"storeName"`

	// ProtocolName is the PillarProtocol new volumes are exported with.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="protocolName cannot be changed (StorageClass parameters are immutable): create another PillarStorageClass"
	ProtocolName ObjectName `json:"protocolName"`

	// FSType is the filesystem made on Filesystem-mode volumes; Block-mode
	// volumes have none.
	// +optional
	// +kubebuilder:default=ext4
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="fsType cannot be changed (StorageClass parameters are immutable): create another PillarStorageClass"
	FSType FSType `json:"fsType,omitempty"`

	// ReclaimPolicy of the generated StorageClass.
	// +optional
	// +kubebuilder:default=Delete
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="reclaimPolicy cannot be changed (it is immutable on a StorageClass): create another PillarStorageClass"
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// VolumeBindingMode of the generated StorageClass.
	// +optional
	// +kubebuilder:default=Immediate
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeBindingMode cannot be changed (it is immutable on a StorageClass): create another PillarStorageClass"
	VolumeBindingMode VolumeBindingMode `json:"volumeBindingMode,omitempty"`

	// MultiNodeBlockWriters lets Block-mode claims of this class be
	// ReadWriteMany: one raw block volume attached to and written from
	// several nodes at once, as a virtual machine's disk during a live
	// migration needs. The application coordinates the writes, as on any
	// shared disk; pillar-csi keeps attach and detach of each node ordered
	// and fenced. Filesystem-mode claims are never ReadWriteMany, in any
	// class: ext4 and xfs mounted on two nodes at once corrupt each other.
	// Off by default. See docs/rwx-block.md.
	// +optional
	// +kubebuilder:default=false
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="multiNodeBlockWriters cannot be changed (StorageClass parameters are immutable): create another PillarStorageClass"
	MultiNodeBlockWriters bool `json:"multiNodeBlockWriters,omitempty"`

	// AllowVolumeExpansion lets claims of this class grow.
	// +optional
	// +kubebuilder:default=true
	AllowVolumeExpansion *bool `json:"allowVolumeExpansion,omitempty"`

	// MountOptions are passed to mount when a Filesystem-mode volume is
	// staged on a worker.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	MountOptions []string `json:"mountOptions,omitempty"`
}

// PillarStorageClassStatus is what the controller last observed.
type PillarStorageClassStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// StorageClassName is the generated StorageClass.
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`

	// Conditions: Ready is True when the store and protocol exist and the
	// StorageClass matches this spec.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PillarStorageClass combines a PillarStore and a PillarProtocol into a
// Kubernetes StorageClass of the same name, which the controller creates,
// keeps in sync and deletes with it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=psc,categories=pillar
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.spec.storeName`
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.spec.protocolName`
// +kubebuilder:printcolumn:name="FSType",type=string,JSONPath=`.spec.fsType`,priority=1
// +kubebuilder:printcolumn:name="Multi-Writers",type=boolean,JSONPath=`.spec.multiNodeBlockWriters`,priority=1
// +kubebuilder:printcolumn:name="Reclaim",type=string,JSONPath=`.spec.reclaimPolicy`,priority=1
// +kubebuilder:printcolumn:name="StorageClass",type=string,JSONPath=`.status.storageClassName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PillarStorageClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the class configuration.
	// +required
	Spec PillarStorageClassSpec `json:"spec"`

	// Status is what the controller observed.
	// +optional
	Status PillarStorageClassStatus `json:"status,omitempty"`
}

// PillarStorageClassList is a list of PillarStorageClasses.
//
// +kubebuilder:object:root=true
type PillarStorageClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PillarStorageClass `json:"items"`
}
