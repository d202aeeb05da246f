package v1alpha1

import (
	"github.com/pillar-csi/pillar-csi/api/export"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultAgentPort is the TCP port pillar-agent serves gRPC on unless a
// PillarAgent says otherwise. The agent runs with hostNetwork, so the port
// is taken on the storage node's own addresses. The kubebuilder default
// of spec.port repeats it (a test checks they agree).
const DefaultAgentPort = export.DefaultAgentPort

// PillarAgentSpec says where a pillar-agent runs and how the controller
// reaches it.
//
// +kubebuilder:validation:XValidation:rule="has(self.nodeName) || has(self.address)",message="set nodeName, address or both: the controller needs one of them to reach the agent"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.nodeName) || (has(self.nodeName) && self.nodeName == oldSelf.nodeName)",message="nodeName cannot be changed or removed once set: the volumes of this agent's stores live on that node"
type PillarAgentSpec struct {
	// NodeName is the Kubernetes Node the agent runs on, i.e. the storage
	// node whose disks back this agent's stores. When address is empty the
	// controller connects to this Node's InternalIP. Once set it cannot
	// change: the volumes of this agent's stores live on that node.
	// +optional
	NodeName ObjectName `json:"nodeName,omitempty"`

	// Address is the IP address or DNS name the controller dials to reach
	// the agent's gRPC endpoint. It may change (for example when the storage
	// node is renumbered). When empty, the Node's InternalIP is used.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches('^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$') || self.matches('^(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,6})?|[0-9a-fA-F]{1,4}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,5})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){1}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,4})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){2}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,3})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){3}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,2})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){4}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,1})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){5}::([0-9a-fA-F]{1,4})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){6}::|([0-9a-fA-F]{1,4}:){6}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|::([0-9a-fA-F]{1,4}:){0,5}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}::([0-9a-fA-F]{1,4}:){0,4}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){1}::([0-9a-fA-F]{1,4}:){0,3}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){2}::([0-9a-fA-F]{1,4}:){0,2}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){3}::([0-9a-fA-F]{1,4}:){0,1}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){4}::((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))$') || (!self.matches('^[0-9.]*$') && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'))`,message="must be an IPv4 address, an IPv6 address (without a zone) or a lowercase DNS name"
	Address string `json:"address,omitempty"`

	// Port is the TCP port of the agent's gRPC endpoint.
	// +optional
	// +kubebuilder:default=9420
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// TLS, when set, makes the controller talk to this agent over mutual
	// TLS. When absent the connection is plaintext gRPC.
	// +optional
	TLS *AgentTLS `json:"tls,omitempty"`
}

// AgentTLS is the client side of mutual TLS between the controller and an
// agent. The Secret is either issued by cert-manager (the Helm chart's
// cert-manager mode creates the Issuer and Certificates) or provided by the
// operator; either way it has the keys tls.crt, tls.key and ca.crt.
type AgentTLS struct {
	// SecretRef names the Secret holding the controller's client
	// certificate (tls.crt), its key (tls.key) and the CA that signed the
	// agent's serving certificate (ca.crt).
	// +required
	SecretRef SecretReference `json:"secretRef"`

	// ServerName is the name the agent's certificate must carry. When
	// empty the host part of the address the controller dials is used.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`
}

// SecretReference names a Secret in a namespace.
type SecretReference struct {
	// Name of the Secret.
	// +required
	Name ObjectName `json:"name"`

	// Namespace of the Secret.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace ObjectName `json:"namespace"`
}

// AnnotationAcceptMarksStore, set on a PillarAgent to the identity its
// agent now reports, accepts a new fencing marks store in place of the one
// the controller pinned (status.marksStoreID), once an operator has
// recovered what the lost store held (docs/troubleshooting.md).
const AnnotationAcceptMarksStore = "pillar-csi.io/accept-marks-store"

// PillarAgentStatus is what the controller last observed of the agent.
type PillarAgentStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Endpoint is the host:port the controller last dialed.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// AgentVersion is the version the agent reported.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`

	// InstanceID is the agent process the controller last talked to (it
	// changes on every agent restart). A change makes the controller push
	// the desired exports of the agent's volumes back.
	// +optional
	InstanceID string `json:"instanceID,omitempty"`

	// BootID is the storage node's kernel boot ID as the agent last
	// reported it; it changes when the node reboots.
	// +optional
	BootID string `json:"bootID,omitempty"`

	// MarksStoreID is the identity of the agent's fencing marks store that
	// the controller pinned when it first saw it. An agent that reports
	// another identity has lost its marks (a wiped or replaced directory):
	// the agent is not Ready (MarksStoreChanged) and no call goes to it
	// until an operator accepts the new store with the annotation
	// pillar-csi.io/accept-marks-store set to its identity.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	MarksStoreID string `json:"marksStoreID,omitempty"`

	// LastRestartTime is when the controller last noticed a new agent
	// instance.
	// +optional
	LastRestartTime *metav1.Time `json:"lastRestartTime,omitempty"`

	// Conditions: Ready is True when the agent answered the controller's
	// last call.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PillarAgent says where a pillar-agent (the gRPC server on a storage node)
// runs and how the controller reaches it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=pagent,categories=pillar
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.port`
// +kubebuilder:printcolumn:name="TLS",type=string,JSONPath=`.spec.tls.secretRef.name`,priority=1
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.agentVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PillarAgent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is where the agent is.
	// +required
	Spec PillarAgentSpec `json:"spec"`

	// Status is what the controller observed.
	// +optional
	Status PillarAgentStatus `json:"status,omitempty"`
}

// PillarAgentList is a list of PillarAgents.
//
// +kubebuilder:object:root=true
type PillarAgentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PillarAgent `json:"items"`
}
