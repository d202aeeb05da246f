package v1alpha1

// Names of the conditions the controller sets. Every status carries
// metav1.Conditions with these types, and observedGeneration, so
// `kubectl describe` shows whether the controller has seen the latest spec.
const (
	// ConditionReady is True when the object is usable: the agent answered,
	// the store's pool exists, the StorageClass is in sync, the volume is
	// provisioned and exported.
	ConditionReady = "Ready"

	// ConditionExportSpecMissing is True on a PillarVolumeState that has no
	// spec.export, typically a volume created by a release that did not
	// record it. The controller never guesses the bind address, port or ACL
	// setting from what it sees on the storage node; the operator states them
	// in spec.export (see the README's recovery procedure) and the condition
	// clears.
	ConditionExportSpecMissing = "ExportSpecMissing"
)

// IPAddress is an IPv4 address in dotted-decimal form (no leading zeros) or
// an IPv6 address in any RFC 4291 text form, without a zone. The unspecified
// address (0.0.0.0 or ::) means every address of the host.
//
// The rule is a regular expression rather than CEL's isIP() because isIP()
// needs Kubernetes 1.31, and a CRD using it cannot even be installed on an
// older API server.
//
// +kubebuilder:validation:MinLength=2
// +kubebuilder:validation:MaxLength=45
// +kubebuilder:validation:XValidation:rule=`self.matches('^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$') || self.matches('^(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,6})?|[0-9a-fA-F]{1,4}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,5})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){1}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,4})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){2}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,3})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){3}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,2})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){4}::([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){0,1})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){5}::([0-9a-fA-F]{1,4})?|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){6}::|([0-9a-fA-F]{1,4}:){6}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|::([0-9a-fA-F]{1,4}:){0,5}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}::([0-9a-fA-F]{1,4}:){0,4}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){1}::([0-9a-fA-F]{1,4}:){0,3}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){2}::([0-9a-fA-F]{1,4}:){0,2}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){3}::([0-9a-fA-F]{1,4}:){0,1}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])|[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){4}::((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))$')`,message="must be an IPv4 address (such as 192.0.2.10) or an IPv6 address (such as 2001:db8::10), without a zone"
type IPAddress string

// NQN is an NVMe Qualified Name (NVM Express Base Specification, "NVMe
// Qualified Names"): "nqn.", the year and month the naming authority took
// its domain, ".", that domain reversed, ":" and a name unique under the
// domain, at most 222 bytes (the NVMe specification allows 223, but the
// Linux initiator refuses an NQN of 223 bytes or more); for example
// nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6. The
// name part is printable ASCII without "/", because nvmet uses an NQN as a
// configfs directory name.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=222
// +kubebuilder:validation:XValidation:rule=`self.matches('^nqn[.][0-9]{4}-(0[1-9]|1[0-2])[.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*:[!-.0-~]+$')`,message="must be an NVMe Qualified Name such as nqn.2014-08.org.nvmexpress:uuid:<uuid> (nqn.yyyy-mm.reversed.domain:name, printable ASCII without spaces or '/', at most 222 characters)"
type NQN string

// ObjectName is the name of another cluster-scoped object (a Pillar*
// resource, a Node, a StorageClass): a lowercase RFC 1123 subdomain.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="must be a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
type ObjectName string
