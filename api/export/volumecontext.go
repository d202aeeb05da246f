package export

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Keys of the CSI volume context. The controller sets them in
// CreateVolumeResponse.volume.volume_context; the CO hands the same map to
// NodeStageVolume and NodePublishVolume, where pillar-node reads it with
// ParseVolumeContext. The filesystem type is not here: it travels in the
// volume capability (mount.fs_type), where the CSI spec puts it.
const (
	// ContextTransport is the NVMe-oF transport; only "tcp" is served.
	ContextTransport = "pillar-csi.io/transport"
	// ContextTargetAddress is the IP address the target listens on
	// (PillarProtocol bindAddress), IPv4 or IPv6 without brackets.
	ContextTargetAddress = "pillar-csi.io/targetAddress"
	// ContextTargetPort is the target's TCP port, decimal.
	ContextTargetPort = "pillar-csi.io/targetPort"
	// ContextSubsystemNQN is the volume's subsystem NQN. It must equal the
	// NQN For derives from the volume ID: the node refuses a context that
	// would connect it to another volume's subsystem.
	ContextSubsystemNQN = "pillar-csi.io/subsystemNQN"

	// The connect options mirror api/v1alpha1.NVMeOFConnectOptions, field
	// by field; an absent key leaves the kernel's default.

	// ContextCtrlLossTimeoutSeconds is ctrl_loss_tmo; -1 reconnects forever.
	ContextCtrlLossTimeoutSeconds = "pillar-csi.io/ctrlLossTimeoutSeconds"
	// ContextReconnectDelaySeconds is reconnect_delay.
	ContextReconnectDelaySeconds = "pillar-csi.io/reconnectDelaySeconds"
	// ContextKeepAliveTimeoutSeconds is keep_alive_tmo.
	ContextKeepAliveTimeoutSeconds = "pillar-csi.io/keepAliveTimeoutSeconds"
	// ContextNrIOQueues is nr_io_queues.
	ContextNrIOQueues = "pillar-csi.io/nrIOQueues"
	// ContextQueueSize is queue_size.
	ContextQueueSize = "pillar-csi.io/queueSize"
)

// TransportTCP is the only transport served so far.
const TransportTCP = "tcp"

// ErrInvalidVolumeContext is wrapped by the *Error of a volume context that
// ParseVolumeContext rejects.
var ErrInvalidVolumeContext = errors.New("invalid volume context")

// ErrInvalidNodeID is wrapped by the *Error of a node ID that ParseNodeID
// or FormatNodeID rejects.
var ErrInvalidNodeID = errors.New("invalid node ID")

// ConnectOptions are the nvme-fabrics connect options of a volume; nil
// leaves the kernel's default. Ranges are those of the CRD
// (api/v1alpha1.NVMeOFConnectOptions), which are the kernel's.
type ConnectOptions struct {
	CtrlLossTimeoutSeconds  *int32
	ReconnectDelaySeconds   *int32
	KeepAliveTimeoutSeconds *int32
	NrIOQueues              *int32
	QueueSize               *int32
}

// VolumeContext is the parsed, validated volume context of one volume.
type VolumeContext struct {
	Transport    string     // TransportTCP
	Address      netip.Addr // target address
	Port         uint16     // target TCP port, never 0
	SubsystemNQN string     // equals For(volumeID).SubsystemNQN
	Connect      ConnectOptions
}

// connectOption binds a context key to its field and range.
type connectOption struct {
	key      string
	min, max int32
	field    func(*ConnectOptions) **int32
}

var connectOptions = []connectOption{
	{ContextCtrlLossTimeoutSeconds, -1, 1<<31 - 1, func(o *ConnectOptions) **int32 { return &o.CtrlLossTimeoutSeconds }},
	{ContextReconnectDelaySeconds, 1, 1<<31 - 1, func(o *ConnectOptions) **int32 { return &o.ReconnectDelaySeconds }},
	{ContextKeepAliveTimeoutSeconds, 1, 65535, func(o *ConnectOptions) **int32 { return &o.KeepAliveTimeoutSeconds }},
	{ContextNrIOQueues, 1, 1024, func(o *ConnectOptions) **int32 { return &o.NrIOQueues }},
	{ContextQueueSize, 16, 1024, func(o *ConnectOptions) **int32 { return &o.QueueSize }},
}

// ParseVolumeContext reads and validates the volume context of volumeID.
// Keys outside the pillar-csi.io/ prefix are ignored (the CO adds its own,
// such as csi.storage.k8s.io/pv/name); an unknown pillar-csi.io/ key is an
// error, because it means the controller and the node disagree on the
// contract. The error is an *Error wrapping ErrInvalidVolumeContext (or
// ErrInvalidVolumeID) that names the offending key.
func ParseVolumeContext(volumeID string, ctx map[string]string) (VolumeContext, error) {
	const op = "export.ParseVolumeContext"
	id, err := For(volumeID)
	if err != nil {
		return VolumeContext{}, err
	}
	bad := func(format string, args ...any) error {
		return &Error{Op: op, Value: volumeID, Err: fmt.Errorf("%w: "+format, append([]any{ErrInvalidVolumeContext}, args...)...)}
	}
	known := map[string]bool{ContextTransport: true, ContextTargetAddress: true, ContextTargetPort: true, ContextSubsystemNQN: true}
	for _, o := range connectOptions {
		known[o.key] = true
	}
	var unknown []string
	for k := range ctx {
		if strings.HasPrefix(k, "pillar-csi.io/") && !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return VolumeContext{}, bad("unknown key(s) %s", strings.Join(unknown, ", "))
	}
	required := func(k string) (string, error) {
		v, ok := ctx[k]
		if !ok || v == "" {
			return "", bad("%s is missing", k)
		}
		return v, nil
	}

	var vc VolumeContext
	tr, err := required(ContextTransport)
	if err != nil {
		return VolumeContext{}, err
	}
	if tr != TransportTCP {
		return VolumeContext{}, bad("%s %q is not supported (want %q)", ContextTransport, tr, TransportTCP)
	}
	vc.Transport = tr

	addr, err := required(ContextTargetAddress)
	if err != nil {
		return VolumeContext{}, err
	}
	vc.Address, err = netip.ParseAddr(addr)
	if err != nil || vc.Address.Zone() != "" || vc.Address.IsUnspecified() {
		return VolumeContext{}, bad("%s %q is not a unicast IP address", ContextTargetAddress, addr)
	}

	port, err := required(ContextTargetPort)
	if err != nil {
		return VolumeContext{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return VolumeContext{}, bad("%s %q is not a TCP port (1-65535)", ContextTargetPort, port)
	}
	vc.Port = uint16(p)

	nqn, err := required(ContextSubsystemNQN)
	if err != nil {
		return VolumeContext{}, err
	}
	if nqn != id.SubsystemNQN {
		return VolumeContext{}, bad("%s %q is not the subsystem of volume %q (want %q)", ContextSubsystemNQN, nqn, volumeID, id.SubsystemNQN)
	}
	vc.SubsystemNQN = nqn

	for _, o := range connectOptions {
		v, ok := ctx[o.key]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || int32(n) < o.min || int32(n) > o.max {
			return VolumeContext{}, bad("%s %q is not an integer in [%d, %d]", o.key, v, o.min, o.max)
		}
		n32 := int32(n)
		*o.field(&vc.Connect) = &n32
	}
	return vc, nil
}

// Map renders vc as a volume context, the inverse of ParseVolumeContext.
// The controller builds its CreateVolumeResponse from it.
func (vc VolumeContext) Map() map[string]string {
	m := map[string]string{
		ContextTransport:     vc.Transport,
		ContextTargetAddress: vc.Address.String(),
		ContextTargetPort:    strconv.FormatUint(uint64(vc.Port), 10),
		ContextSubsystemNQN:  vc.SubsystemNQN,
	}
	c := vc.Connect
	for _, o := range connectOptions {
		if p := *o.field(&c); p != nil {
			m[o.key] = strconv.FormatInt(int64(*p), 10)
		}
	}
	return m
}

// MaxNodeIDLength is the CSI limit on node_id (NodeGetInfoResponse), bytes.
const MaxNodeIDLength = 256

// NodeIDSeparator separates the node name from the host NQN in a node ID.
// Neither part can contain it: Kubernetes node names are DNS subdomains and
// NQNPattern excludes '/'. A node ID's host NQN cannot contain ',', '=' or
// whitespace either (hostNQNReserved).
const NodeIDSeparator = "/"

// nodeNameRE is a Kubernetes node name (an RFC 1123 DNS subdomain).
var nodeNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// NodeID is what pillar-node reports as its CSI node_id.
//
// ControllerPublishVolume receives nothing about the node but node_id, and
// the controller needs two facts from it: the worker's host NQN, to put it
// on the subsystem's access list (allowed_hosts), and the Kubernetes node
// name, to record the publication in the PillarVolumeState where operators
// read it. Carrying both in the ID keeps ControllerPublish free of lookups
// (no Node annotation to read, no race with a node that has not yet
// annotated itself) and makes a host NQN change (a reinstalled worker) a new
// node ID, which kubelet re-registers, rather than a silent ACL mismatch.
//
// The text form is NodeName + NodeIDSeparator + HostNQN, for example
// "worker-1/nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-…", at most
// MaxNodeIDLength bytes. A node name of up to 253 bytes and an NQN of up to
// 222 bytes could exceed that together; FormatNodeID refuses such a pair
// with a clear error rather than truncating either part.
type NodeID struct {
	NodeName string
	HostNQN  string
}

// String returns the text form; it does not validate (FormatNodeID does).
func (n NodeID) String() string { return n.NodeName + NodeIDSeparator + n.HostNQN }

// FormatNodeID validates nodeName and hostNQN and returns the node ID.
func FormatNodeID(nodeName, hostNQN string) (string, error) {
	n := NodeID{NodeName: nodeName, HostNQN: hostNQN}
	if err := n.validate("export.FormatNodeID"); err != nil {
		return "", err
	}
	return n.String(), nil
}

// ParseNodeID parses and validates a node ID made by FormatNodeID.
func ParseNodeID(id string) (NodeID, error) {
	name, nqn, ok := strings.Cut(id, NodeIDSeparator)
	if !ok {
		return NodeID{}, &Error{Op: "export.ParseNodeID", Value: id,
			Err: fmt.Errorf("%w: want NODE-NAME%sHOST-NQN", ErrInvalidNodeID, NodeIDSeparator)}
	}
	n := NodeID{NodeName: name, HostNQN: nqn}
	if err := n.validate("export.ParseNodeID"); err != nil {
		return NodeID{}, err
	}
	return n, nil
}

// hostNQNReserved names the first ',', '=' or whitespace character of a
// host NQN and its offset, or returns "". NQNPattern allows ',' and '='
// (and refuses whitespace without saying so). Only the host NQN of a node
// ID is held to this, not ValidateNQN's callers: subsystem NQNs are
// generated here and never contain these characters, while a host NQN is
// whatever a worker's /etc/nvme/hostnqn says.
func hostNQNReserved(nqn string) string {
	for i, r := range nqn {
		switch {
		case r == ',' || r == '=':
			return fmt.Sprintf("%q at byte %d", r, i)
		case unicode.IsSpace(r):
			return fmt.Sprintf("whitespace %q at byte %d", r, i)
		}
	}
	return ""
}

func (n NodeID) validate(op string) error {
	s := n.String()
	var err error
	switch {
	case len(n.NodeName) == 0 || len(n.NodeName) > 253 || !nodeNameRE.MatchString(n.NodeName):
		err = fmt.Errorf("%w: node name %q is not a Kubernetes node name (DNS subdomain)", ErrInvalidNodeID, n.NodeName)
	case hostNQNReserved(n.HostNQN) != "":
		err = fmt.Errorf("%w: host NQN contains %s: ',', '=' and whitespace are refused because the controller "+
			"and its logs carry node IDs in comma-separated lists and key=value pairs, which such a character "+
			"would split (make a new one with nvme gen-hostnqn)", ErrInvalidNodeID, hostNQNReserved(n.HostNQN))
	case ValidateNQN(n.HostNQN) != nil:
		err = fmt.Errorf("%w: host NQN: %w", ErrInvalidNodeID, errors.Unwrap(ValidateNQN(n.HostNQN)))
	case len(s) > MaxNodeIDLength:
		err = fmt.Errorf("%w: %d bytes, CSI allows at most %d (shorten the node name)", ErrInvalidNodeID, len(s), MaxNodeIDLength)
	default:
		return nil
	}
	return &Error{Op: op, Value: s, Err: err}
}
