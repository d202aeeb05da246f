package configfs

import (
	"fmt"
	"strconv"
	"strings"
)

// State is everything under <root>/nvmet, as Read returns it. Slices are
// sorted: subsystems and hosts by NQN, ports by ID.
type State struct {
	Subsystems []Subsystem
	Ports      []Port
	Hosts      []Host
}

// SubsystemAttrs are the attr_* files of subsystems/<nqn>. In an Export a
// zero value means "leave what the kernel has" (the kernel rejects an empty
// serial or model, a zero controller ID and a zero queue count, so zero is
// never a value one could mean); AllowAnyHost and PIEnable are always
// applied. In a State a zero value may also mean the running kernel does not
// have that attribute (attr_qid_max appeared in Linux 6.0, attr_pi_enable
// needs CONFIG_BLK_DEV_INTEGRITY).
type SubsystemAttrs struct {
	AllowAnyHost bool   // attr_allow_any_host
	Version      string // attr_version, "1.3" or "2.0.1"
	Serial       string // attr_serial, at most 20 printable ASCII bytes
	Model        string // attr_model, at most 40 printable ASCII bytes
	CntlIDMin    uint16 // attr_cntlid_min
	CntlIDMax    uint16 // attr_cntlid_max
	QIDMax       uint16 // attr_qid_max
	PIEnable     bool   // attr_pi_enable
}

// Subsystem is one directory under nvmet/subsystems.
type Subsystem struct {
	NQN   string
	Attrs SubsystemAttrs
	// Namespaces are sorted by NSID.
	Namespaces []Namespace
	// AllowedHosts are the host NQNs linked under allowed_hosts/, sorted.
	// They are only consulted while Attrs.AllowAnyHost is false.
	AllowedHosts []string
}

// Namespace is subsystems/<nqn>/namespaces/<nsid>.
type Namespace struct {
	// NSID is the directory name, parsed as the kernel parses it: a
	// namespace another tool named "0x10" has NSID 16.
	NSID uint32
	// DevicePath is a block device or a regular file (nvmet falls back to
	// its file backend when the path is not a block device).
	DevicePath string // device_path
	// DeviceUUID and DeviceNGUID are in the kernel's 8-4-4-4-12 lower-case
	// form; the all-zero value the kernel starts with is shown as "".
	DeviceUUID  string // device_uuid
	DeviceNGUID string // device_nguid
	// ANAGroupID is 1 (the default group) unless set; 0 in an Export
	// means "leave as is".
	ANAGroupID uint32 // ana_grpid
	BufferedIO bool   // buffered_io (file backend only)
	Enabled    bool   // enable
}

// Address identifies a port: two ports with the same Address cannot both be
// enabled, so Apply shares one port between every subsystem exported on the
// same Address.
type Address struct {
	TrType  string // addr_trtype: "tcp", "rdma", "fc" or "loop"
	AdrFam  string // addr_adrfam: "ipv4", "ipv6", "ib", "fc", "loop" or "pcie"
	TrAddr  string // addr_traddr, e.g. "192.0.2.10" or "fd00::10"
	TrSvcID string // addr_trsvcid, the TCP port for tcp and rdma
}

func (a Address) String() string {
	host := a.TrAddr
	if a.AdrFam == "ipv6" {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s://%s:%s", a.TrType, host, a.TrSvcID)
}

func (a Address) key() string {
	return a.TrType + "\x00" + a.AdrFam + "\x00" + a.TrAddr + "\x00" + a.TrSvcID
}

// Port is one directory under nvmet/ports.
type Port struct {
	// ID is the port ID initiators see in the discovery log: the
	// directory name, parsed as the kernel parses it (see parseID), so
	// a port another tool named "0x10" has ID 16.
	ID      uint16
	Address Address
	// TReq is addr_treq ("not specified", "required", "not required").
	TReq string
	// InlineDataSize is param_inline_data_size: -1 until the port is
	// first enabled, when the transport replaces it with its own value.
	InlineDataSize int
	PIEnable       bool // param_pi_enable
	// Subsystems are the NQNs linked under subsystems/, sorted.
	Subsystems []string
	Referrals  []Referral
	// ANAGroups includes the default group 1 the kernel creates.
	ANAGroups []ANAGroup
}

// Referral is ports/<id>/referrals/<name>: a discovery log entry pointing at
// another port.
type Referral struct {
	Name    string
	Address Address
	PortID  uint16 // addr_portid
	TReq    string // addr_treq
	Enabled bool   // enable
}

// ANAGroup is ports/<id>/ana_groups/<id>.
type ANAGroup struct {
	ID    uint32
	State string // ana_state, e.g. "optimized"
}

// Host is one directory under nvmet/hosts. The DH-HMAC-CHAP secrets are not
// read: they are not needed to manage exports and should not travel in
// logs or state dumps.
type Host struct {
	NQN           string
	DHCHAPHash    string // dhchap_hash ("" without CONFIG_NVME_TARGET_AUTH)
	DHCHAPDHGroup string // dhchap_dhgroup
}

// Export is the desired state of one NVMe-oF export: a subsystem, its
// namespaces, the ports it is reachable on and who may connect.
type Export struct {
	NQN   string
	Attrs SubsystemAttrs
	// Namespaces not listed are removed from the subsystem. Apply sets
	// enable to each namespace's Enabled.
	Namespaces []Namespace
	// Ports lists the addresses the subsystem is linked to; links to
	// other ports are removed.
	Ports []Address
	// AllowedHosts is the access list used while Attrs.AllowAnyHost is
	// false. It must be empty when Attrs.AllowAnyHost is true.
	AllowedHosts []string
}

// Subsystem returns the subsystem with the given NQN.
func (s *State) Subsystem(nqn string) (Subsystem, bool) {
	for _, sub := range s.Subsystems {
		if sub.NQN == nqn {
			return sub, true
		}
	}
	return Subsystem{}, false
}

// Export reconstructs the export of one subsystem from the state: its
// attributes, namespaces, allowed hosts and the addresses of the ports it is
// linked to. For an export created by Apply with every attribute given, the
// result equals the applied Export after normalization (sorted slices,
// canonical UUIDs and addresses).
func (s *State) Export(nqn string) (Export, bool) {
	sub, ok := s.Subsystem(nqn)
	if !ok {
		return Export{}, false
	}
	e := Export{
		NQN:          sub.NQN,
		Attrs:        sub.Attrs,
		Namespaces:   sub.Namespaces,
		AllowedHosts: sub.AllowedHosts,
	}
	for _, p := range s.Ports {
		for _, linked := range p.Subsystems {
			if linked == nqn {
				e.Ports = append(e.Ports, canonicalAddress(p.Address))
			}
		}
	}
	e.Ports = sortedAddresses(e.Ports)
	return e, true
}

// Normalize returns e validated and in the canonical form State.Export
// produces, for comparing a desired export with one read back.
func (e Export) Normalize() (Export, error) { return e.normalize() }

func parseBool(v string) (bool, error) {
	switch v {
	case "0", "":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("%q is not 0 or 1", v)
}

func formatBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// parseID parses the name of a port, namespace or ANA group directory as
// nvmet does when the directory is made (kstrtou16 and kstrtou32 with base
// 0): an optional "+", then "0x" or "0X" and hex digits, a "0" and octal
// digits, or decimal digits, and at most one trailing newline. Other tools
// may name a port "0x10" or a namespace "010"; to the kernel, and so to
// Read and Apply, those are port 16 and namespace 8.
func parseID(name string, bits int) (uint64, error) {
	s := strings.TrimPrefix(name, "+")
	s = strings.TrimSuffix(s, "\n")
	base := 10
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && isHex(s[2]):
		base, s = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base = 8
	}
	// With an explicit base, ParseUint takes neither a sign, a prefix
	// nor underscores, just as the kernel's _parse_integer.
	return strconv.ParseUint(s, base, bits)
}
