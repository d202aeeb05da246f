package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackendType names the storage backend of a PillarStore.
// +kubebuilder:validation:Enum=ZFS;LVM
type BackendType string

const (
	// BackendZFS stores each volume as a ZFS zvol.
	BackendZFS BackendType = "ZFS"
	// BackendLVM stores each volume as an LVM logical volume, linear or
	// (with a thin pool) thin.
	BackendLVM BackendType = "LVM"
)

// PillarStoreSpec is a storage pool on one agent's node. Exactly one of zfs
// and lvm is set, the one named by type.
//
// +kubebuilder:validation:XValidation:rule="has(self.zfs) == (self.type == 'ZFS')",message="zfs must be set when type is ZFS, and only then"
// +kubebuilder:validation:XValidation:rule="has(self.lvm) == (self.type == 'LVM')",message="lvm must be set when type is LVM, and only then"
type PillarStoreSpec struct {
	// AgentName is the PillarAgent whose node holds the pool. It cannot
	// change: the store's volumes live on that node.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="agentName cannot be changed: the store's volumes live on that agent's node"
	AgentName ObjectName `json:"agentName"`

	// Type is the backend: ZFS or LVM. It cannot change.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="type cannot be changed: existing volumes were created by the other backend"
	Type BackendType `json:"type"`

	// ZFS configures a ZFS store; set exactly when type is ZFS.
	// +optional
	ZFS *ZFSStore `json:"zfs,omitempty"`

	// LVM configures an LVM store; set exactly when type is LVM.
	// +optional
	LVM *LVMStore `json:"lvm,omitempty"`
}

// ZFSStore places volumes as zvols named <pool>/<parentDataset>/<volume ID>.
//
// +kubebuilder:validation:XValidation:rule="has(self.parentDataset) == has(oldSelf.parentDataset) && (!has(self.parentDataset) || self.parentDataset == oldSelf.parentDataset)",message="parentDataset cannot be added, changed or removed: existing zvols live under it"
type ZFSStore struct {
	// Pool is the name of an existing zpool. It cannot change: existing
	// zvols live in it. Pool and parentDataset are short enough that a full
	// zvol name (with a 128-character volume ID) stays within ZFS's
	// 255-character limit.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[A-Za-z][A-Za-z0-9_.:-]*$')`,message="must be a ZFS pool name: a letter, then letters, digits, '_', '-', ':' or '.'"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="pool cannot be changed: existing zvols live in it"
	Pool string `json:"pool"`

	// ParentDataset is the dataset, relative to the pool, under which zvols
	// are created (for example "pillar/volumes"). The agent creates it when
	// missing. When empty zvols are created at the top of the pool.
	// +optional
	// +kubebuilder:validation:MaxLength=60
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[A-Za-z0-9_.:-]+(/[A-Za-z0-9_.:-]+)*$')`,message="must be a dataset path relative to the pool, such as pillar/volumes: components of letters, digits, '_', '-', ':' or '.' separated by '/', with no leading or trailing '/'"
	ParentDataset string `json:"parentDataset,omitempty"`

	// Sparse creates zvols without a refreservation (thin provisioning):
	// space is taken as data is written, and the pool can be overcommitted.
	// Applies to volumes created after the change.
	// +optional
	// +kubebuilder:default=false
	Sparse bool `json:"sparse,omitempty"`

	// Properties are ZFS properties set on every zvol at creation (zfs
	// create -o name=value), for example compression=lz4 or
	// volblocksize=16k. Applies to volumes created after the change. volsize
	// and refreservation are derived from the volume's capacity and from
	// sparse and cannot be set here. volmode may only be dev (the default)
	// or none: full or geom would expose each volume's partitions to the
	// storage node's own kernel, which would then read what a tenant wrote.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.matches('^[a-z][a-z0-9_]*$') || k.matches('^[a-z0-9_.+-]+:[a-z0-9_.:+-]+$'))`,message="property names must be native ZFS properties (such as compression) or user properties (module:property)"
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k in ['volsize', 'refreservation', 'reservation'])",message="volsize, refreservation and reservation are set by pillar-csi from the volume's capacity and sparse; remove them from properties"
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(self[k]) <= 1024)",message="property values must be at most 1024 characters"
	// +kubebuilder:validation:XValidation:rule="!has(self.volmode) || self.volmode in ['dev', 'none']",message="volmode must be dev (the default) or none: with full or geom the storage node's kernel would scan the partition tables and LVM labels a tenant writes into its volume"
	Properties map[string]string `json:"properties,omitempty"`
}

// LVMStore places volumes as logical volumes in a volume group, linear or
// (with a thin pool) thin. Neither field can change: existing logical
// volumes live in them.
//
// +kubebuilder:validation:XValidation:rule="has(self.thinPool) == has(oldSelf.thinPool) && (!has(self.thinPool) || self.thinPool == oldSelf.thinPool)",message="thinPool cannot be added, changed or removed: existing logical volumes live in it"
type LVMStore struct {
	// VolumeGroup is the name of an existing LVM volume group.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[A-Za-z0-9+_.][A-Za-z0-9+_.-]*$') && self != '.' && self != '..'`,message="must be an LVM name: letters, digits, '+', '_', '.' and '-', not starting with '-', not '.' or '..'"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeGroup cannot be changed: existing logical volumes live in it"
	VolumeGroup string `json:"volumeGroup"`

	// ThinPool is an existing thin-pool logical volume in the volume group.
	// When set, volumes are thin logical volumes in it; when empty they are
	// linear logical volumes allocated from the volume group.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[A-Za-z0-9+_.][A-Za-z0-9+_.-]*$') && self != '.' && self != '..'`,message="must be an LVM name: letters, digits, '+', '_', '.' and '-', not starting with '-', not '.' or '..'"
	ThinPool string `json:"thinPool,omitempty"`

	// AllowUnzeroedThinPool accepts a thin pool that does not zero the
	// chunks it provisions (created with `lvcreate --zero n`, or changed
	// with `lvchange --zero n`). Such a pool is refused by default: the
	// store is not Ready (ThinPoolNotZeroing) and no volume is created in
	// it, because a write smaller than the pool's chunk size leaves the rest
	// of the chunk holding whatever a deleted volume wrote there, so a new
	// volume (another tenant's) can read a previous volume's data. Set it
	// only if every workload using the store may see every other's old
	// data; the fix that keeps the protection is `lvchange --zero y VG/POOL`
	// on the storage node. Ignored for linear volumes (no thinPool).
	// +optional
	AllowUnzeroedThinPool bool `json:"allowUnzeroedThinPool,omitempty"`
}

// StoreCapacity is the space of a store as the agent last reported it.
type StoreCapacity struct {
	// TotalBytes is the size of the pool, volume group or thin pool.
	TotalBytes int64 `json:"totalBytes"`

	// AvailableBytes is the space left for new volumes; it is what the CSI
	// GetCapacity call reports.
	AvailableBytes int64 `json:"availableBytes"`
}

// PillarStoreStatus is what the controller last observed of the store.
type PillarStoreStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Capacity is the store's space as last reported by its agent.
	// +optional
	Capacity *StoreCapacity `json:"capacity,omitempty"`

	// Conditions: Ready is True when the agent reported the pool or volume
	// group present and usable.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PillarStore is a storage pool on one agent's node: a ZFS pool (and parent
// dataset) or an LVM volume group (and optional thin pool).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=pstore,categories=pillar
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.spec.agentName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.zfs.pool`,priority=1
// +kubebuilder:printcolumn:name="VG",type=string,JSONPath=`.spec.lvm.volumeGroup`,priority=1
// +kubebuilder:printcolumn:name="Total",type=integer,format=int64,JSONPath=`.status.capacity.totalBytes`
// +kubebuilder:printcolumn:name="Available",type=integer,format=int64,JSONPath=`.status.capacity.availableBytes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PillarStore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the pool's configuration.
	// +required
	Spec PillarStoreSpec `json:"spec"`

	// Status is what the controller observed.
	// +optional
	Status PillarStoreStatus `json:"status,omitempty"`
}

// PillarStoreList is a list of PillarStores.
//
// +kubebuilder:object:root=true
type PillarStoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PillarStore `json:"items"`
}

// AnnotationAdoptStoreUID, set on a PillarStore to the storeUID of
// PillarVolumeStates recorded in an earlier store of the same name, lets
// this store act for those volumes: an operator who recreated a deleted
// PillarStore on the same agent and pool says so with it
// (docs/troubleshooting.md, StoreReplaced).
const AnnotationAdoptStoreUID = "pillar-csi.io/adopt-store-uid"
