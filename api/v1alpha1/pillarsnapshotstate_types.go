package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PillarSnapshotStateSpec is the durable record of one snapshot. The
// controller writes it before it asks the agent for the snapshot, so that a
// CreateSnapshot that failed half-way is resumed or rolled back, and never
// leaves a snapshot nothing tracks.
//
// The fencing token of every agent call for the snapshot is the object's
// UID (the snapshot's lifecycle) with generation 1: a snapshot is created
// once and deleted once, and its deletion ends the lifecycle, after which
// the agent refuses every call that names it.
type PillarSnapshotStateSpec struct {
	// SnapshotID is the CSI snapshot ID, equal to this object's name. It
	// cannot change.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')`,message="must be a pillar-csi snapshot ID: at most 128 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="snapshotID cannot be changed"
	SnapshotID string `json:"snapshotID"`

	// SourceVolumeID is the volume the snapshot was taken of. It cannot
	// change.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sourceVolumeID cannot be changed"
	SourceVolumeID string `json:"sourceVolumeID"`

	// StoreName is the PillarStore the snapshot lives in: its source's.
	// It cannot change.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storeName cannot be changed: the snapshot's data lives in that store"
	StoreName ObjectName `json:"storeName"`

	// StoreUID is the UID of that PillarStore, as in PillarVolumeState.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storeUID cannot be changed"
	StoreUID types.UID `json:"storeUID,omitempty"`
}

// PillarSnapshotStateStatus is what the agent confirmed.
type PillarSnapshotStateStatus struct {
	// ReadyToUse is true once the agent confirmed the snapshot exists: it
	// can be restored from.
	// +optional
	ReadyToUse bool `json:"readyToUse,omitempty"`

	// SizeBytes is the size of the source when the snapshot was taken: the
	// smallest volume it can be restored to.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// CreationTime is when the storage node took the snapshot.
	// +optional
	CreationTime *metav1.Time `json:"creationTime,omitempty"`

	// Conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastFailure is the last CSI call on the snapshot that failed, kept
	// until a call of the same operation succeeds.
	// +optional
	LastFailure *OperationFailure `json:"lastFailure,omitempty"`
}

// Annotations of a PillarSnapshotState that name the VolumeSnapshot it was
// created for, when the snapshotter says (--extra-create-metadata).
const (
	// AnnotationVolumeSnapshotName is the VolumeSnapshot's name.
	AnnotationVolumeSnapshotName = "pillar-csi.io/volumesnapshot-name"
	// AnnotationVolumeSnapshotNamespace is its namespace.
	AnnotationVolumeSnapshotNamespace = "pillar-csi.io/volumesnapshot-namespace"
	// AnnotationVolumeSnapshotContentName is its VolumeSnapshotContent.
	AnnotationVolumeSnapshotContentName = "pillar-csi.io/volumesnapshotcontent-name"
)

// PillarSnapshotState is pillar-csi's internal, durable record of one
// snapshot. Its name is the CSI snapshot ID and its UID is the snapshot's
// lifecycle identity in fencing tokens. Like PillarVolumeState it is not in
// the "pillar" category; its own is pillar-volumes.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=snapstate,categories=pillar-volumes
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.snapshotID",message="metadata.name must equal spec.snapshotID: there is exactly one PillarSnapshotState per snapshot"
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.sourceVolumeID`
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.spec.storeName`
// +kubebuilder:printcolumn:name="Size",type=integer,format=int64,JSONPath=`.status.sizeBytes`
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.readyToUse`
// +kubebuilder:printcolumn:name="Snapshot-Namespace",type=string,JSONPath=`.metadata.annotations.pillar-csi\.io/volumesnapshot-namespace`
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.metadata.annotations.pillar-csi\.io/volumesnapshot-name`
// +kubebuilder:printcolumn:name="Failed",type=string,JSONPath=`.status.lastFailure.operation`
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.lastFailure.code`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.lastFailure.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PillarSnapshotState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the snapshot's durable record.
	// +required
	Spec PillarSnapshotStateSpec `json:"spec"`

	// Status is what the agent confirmed.
	// +optional
	Status PillarSnapshotStateStatus `json:"status,omitempty"`
}

// PillarSnapshotStateList is a list of PillarSnapshotStates.
//
// +kubebuilder:object:root=true
type PillarSnapshotStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PillarSnapshotState `json:"items"`
}
