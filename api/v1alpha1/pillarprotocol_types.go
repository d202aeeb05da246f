package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProtocolType names the network protocol a PillarProtocol configures.
// +kubebuilder:validation:Enum=NVMeOFTCP
type ProtocolType string

// ProtocolNVMeOFTCP is NVMe over Fabrics on TCP, exported through the
// kernel's nvmet target and reached with the kernel's nvme-tcp initiator.
const ProtocolNVMeOFTCP ProtocolType = "NVMeOFTCP"

// DefaultNVMeOFTCPPort is the IANA-assigned port of NVMe-oF over TCP.
const DefaultNVMeOFTCPPort = 4420

// PillarProtocolSpec is how volumes are exported and how workers connect to
// them. A change applies to volumes created afterwards: each existing volume
// keeps the export recorded in its PillarVolumeState.
//
// +kubebuilder:validation:XValidation:rule="has(self.nvmeofTCP) == (self.type == 'NVMeOFTCP')",message="nvmeofTCP must be set when type is NVMeOFTCP, and only then"
type PillarProtocolSpec struct {
	// Type is the protocol. Only NVMeOFTCP ships today.
	// +required
	Type ProtocolType `json:"type"`

	// NVMeOFTCP configures NVMe-oF/TCP; set exactly when type is NVMeOFTCP.
	// +optional
	NVMeOFTCP *NVMeOFTCPProtocol `json:"nvmeofTCP,omitempty"`
}

// NVMeOFTCPProtocol is the target-side port and the initiator-side tuning of
// NVMe-oF/TCP exports.
type NVMeOFTCPProtocol struct {
	// BindAddress is the address the nvmet port listens on (the port's
	// addr_traddr) and that workers connect to. The unspecified address
	// (0.0.0.0 or ::) listens on every address of the storage node; workers
	// then connect to the PillarAgent's address.
	// +required
	BindAddress IPAddress `json:"bindAddress"`

	// Port is the TCP port the nvmet port listens on (addr_trsvcid).
	// +optional
	// +kubebuilder:default=4420
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// ACLEnabled restricts each exported subsystem to the host NQNs of the
	// nodes it is published to (nvmet allowed_hosts). When false any host
	// that reaches the port may connect (allow_any_host).
	// +optional
	// +kubebuilder:default=true
	ACLEnabled *bool `json:"aclEnabled,omitempty"`

	// Connect tunes the workers' kernel initiator. Unset fields keep the
	// kernel's defaults.
	// +optional
	Connect *NVMeOFConnectOptions `json:"connect,omitempty"`
}

// NVMeOFConnectOptions are the nvme-fabrics connect options a worker passes
// to the kernel when it attaches a volume (the ranges are the kernel's).
type NVMeOFConnectOptions struct {
	// CtrlLossTimeoutSeconds is how long the kernel keeps reconnecting after
	// losing the target before it fails I/O for good (ctrl_loss_tmo); -1
	// reconnects forever.
	// +optional
	// +kubebuilder:validation:Minimum=-1
	CtrlLossTimeoutSeconds *int32 `json:"ctrlLossTimeoutSeconds,omitempty"`

	// ReconnectDelaySeconds is the pause between reconnect attempts
	// (reconnect_delay).
	// +optional
	// +kubebuilder:validation:Minimum=1
	ReconnectDelaySeconds *int32 `json:"reconnectDelaySeconds,omitempty"`

	// KeepAliveTimeoutSeconds is the NVMe keep-alive timeout
	// (keep_alive_tmo).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	KeepAliveTimeoutSeconds *int32 `json:"keepAliveTimeoutSeconds,omitempty"`

	// NrIOQueues is the number of I/O queues (nr_io_queues); the kernel
	// caps it at the worker's CPU count.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	NrIOQueues *int32 `json:"nrIOQueues,omitempty"`

	// QueueSize is the depth of each I/O queue (queue_size).
	// +optional
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=1024
	QueueSize *int32 `json:"queueSize,omitempty"`
}

// PillarProtocolStatus is what the controller last observed of the protocol.
type PillarProtocolStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// StorageClasses are the PillarStorageClasses that use this protocol,
	// sorted by name.
	// +optional
	// +listType=atomic
	StorageClasses []string `json:"storageClasses,omitempty"`

	// Conditions: Ready is True when the controller accepted the
	// configuration.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PillarProtocol is the network protocol configuration of exports: for
// NVMe-oF/TCP the bind address, port, host ACLs and initiator tuning.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=pproto,categories=pillar
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.nvmeofTCP.bindAddress`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.nvmeofTCP.port`
// +kubebuilder:printcolumn:name="ACL",type=boolean,JSONPath=`.spec.nvmeofTCP.aclEnabled`
// +kubebuilder:printcolumn:name="Classes",type=string,JSONPath=`.status.storageClasses`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PillarProtocol struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the protocol configuration.
	// +required
	Spec PillarProtocolSpec `json:"spec"`

	// Status is what the controller observed.
	// +optional
	Status PillarProtocolStatus `json:"status,omitempty"`
}

// PillarProtocolList is a list of PillarProtocols.
//
// +kubebuilder:object:root=true
type PillarProtocolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PillarProtocol `json:"items"`
}
