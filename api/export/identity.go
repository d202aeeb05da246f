package export

import (
	"crypto/sha1" // RFC 9562 defines version 5 UUIDs with SHA-1; no security property rests on it.
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

const (
	// SubsystemNQNPrefix starts the NQN of every subsystem pillar-csi
	// creates; the volume ID follows it. The date and reversed domain follow
	// the NVMe naming rules for the pillar-csi.io domain.
	SubsystemNQNPrefix = "nqn.2026-01.io.pillar-csi:volume:"

	// DefaultAgentPort is the TCP port pillar-agent serves gRPC on unless
	// a PillarAgent says otherwise (api/v1alpha1.DefaultAgentPort, the
	// CRD's default, is this constant). Here, without Kubernetes
	// dependencies, so that the agent's flag default can name it too.
	DefaultAgentPort = 9420

	// NamespaceID is the NSID of the only namespace in a volume's subsystem.
	NamespaceID uint32 = 1

	// MaxVolumeIDLength is the longest volume ID, in bytes. The CSI spec
	// allows IDs of up to 128 bytes, and SubsystemNQNPrefix plus 128 bytes
	// stays well within MaxNQNLength.
	MaxVolumeIDLength = 128

	// MaxNQNLength is the longest NQN pillar-csi accepts, in bytes: the
	// longest a Linux host can use. The NVMe specification allows 223
	// bytes (NVMF_NQN_SIZE), but the Linux initiator refuses an NQN of 223
	// bytes or more (nvmf_parse_options: "needs to be < 223 bytes"), and
	// configfs.MaxNQNLen, proven in the kernel lab, is this value.
	MaxNQNLength = 222

	// PillarUUIDNamespace is the RFC 9562 namespace of namespace UUIDs.
	// Changing it would change the identity of every existing volume.
	PillarUUIDNamespace = "0d142462-7500-4180-b3d2-03695adb23c4"
)

// nguidLabel separates NGUID derivation from any other SHA-256 over a
// volume ID. Changing it would change the identity of every volume.
const nguidLabel = "pillar-csi.io/namespace-nguid\x00"

// VolumeIDPattern is the form of a volume ID: a name that is at the same
// time a Kubernetes object name (the PillarVolumeState is named after it), a
// ZFS and LVM name component, an nvmet configfs directory name and an NQN
// suffix.
const VolumeIDPattern = `^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`

// NQNPattern is the form of an NVMe Qualified Name accepted by pillar-csi:
// "nqn.", year and month, ".", a reversed domain, ":" and a name of
// printable ASCII without "/" (nvmet turns NQNs into configfs directory
// names). The CRDs validate host and subsystem NQNs with the same pattern.
const NQNPattern = `^nqn[.][0-9]{4}-(0[1-9]|1[0-2])[.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*:[!-.0-~]+$`

var (
	volumeIDRE = regexp.MustCompile(VolumeIDPattern)
	nqnRE      = regexp.MustCompile(NQNPattern)
	// uuidNS is PillarUUIDNamespace as bytes (a test keeps them equal).
	uuidNS = [16]byte{0x0d, 0x14, 0x24, 0x62, 0x75, 0x00, 0x41, 0x80, 0xb3, 0xd2, 0x03, 0x69, 0x5a, 0xdb, 0x23, 0xc4}
)

// ErrInvalidVolumeID is wrapped by the *Error of a volume ID that does not
// match VolumeIDPattern or is longer than MaxVolumeIDLength.
var ErrInvalidVolumeID = errors.New("invalid volume ID")

// ErrInvalidNQN is wrapped by the *Error of a string that is not an NQN
// pillar-csi accepts (NQNPattern, at most MaxNQNLength bytes).
var ErrInvalidNQN = errors.New("invalid NQN")

// Error reports invalid input to one of this package's functions.
type Error struct {
	Op    string // the function, such as "export.For"
	Value string // the rejected input
	Err   error  // ErrInvalidVolumeID, ErrInvalidNQN, ErrInvalidVolumeContext or ErrInvalidNodeID, possibly wrapped
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Op, e.Value, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Identity is every identifier of one volume's export.
type Identity struct {
	// VolumeID is the CSI volume ID the rest is derived from.
	VolumeID string
	// SubsystemNQN is the NQN of the volume's nvmet subsystem.
	SubsystemNQN string
	// NamespaceID is the NSID of the volume's namespace in that subsystem.
	NamespaceID uint32
	// UUID is the namespace UUID (nvmet device_uuid; /sys/block/*/uuid on
	// the initiator).
	UUID string
	// NGUID is the namespace NGUID (nvmet device_nguid; /sys/block/*/nguid
	// on the initiator).
	NGUID string
}

// For derives the export identity of a volume.
func For(volumeID string) (Identity, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return Identity{}, &Error{Op: "export.For", Value: volumeID, Err: err}
	}
	return Identity{
		VolumeID:     volumeID,
		SubsystemNQN: SubsystemNQNPrefix + volumeID,
		NamespaceID:  NamespaceID,
		UUID:         formatUUID(uuidV5(uuidNS, volumeID)),
		NGUID:        formatUUID(nguid(volumeID)),
	}, nil
}

// ValidateVolumeID reports whether id can be a pillar-csi volume ID. The
// error wraps ErrInvalidVolumeID and says what is wrong.
func ValidateVolumeID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidVolumeID)
	case len(id) > MaxVolumeIDLength:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidVolumeID, len(id), MaxVolumeIDLength)
	case !volumeIDRE.MatchString(id):
		return fmt.Errorf("%w: only lowercase letters, digits, '-' and '.' are allowed, starting and ending with a letter or digit", ErrInvalidVolumeID)
	}
	return nil
}

// ValidateNQN reports whether nqn is an NVMe Qualified Name pillar-csi
// accepts, for example a node's host NQN. The error wraps ErrInvalidNQN.
func ValidateNQN(nqn string) error {
	var err error
	switch {
	case len(nqn) > MaxNQNLength:
		err = fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidNQN, len(nqn), MaxNQNLength)
	case !nqnRE.MatchString(nqn):
		err = fmt.Errorf("%w: want nqn.yyyy-mm.reversed.domain:name, printable ASCII without spaces or '/'", ErrInvalidNQN)
	default:
		return nil
	}
	return &Error{Op: "export.ValidateNQN", Value: nqn, Err: err}
}

// VolumeIDFromNQN returns the volume ID of a pillar-owned subsystem NQN. ok
// is false when nqn does not start with SubsystemNQNPrefix or what follows
// is not a valid volume ID: such a subsystem is not pillar-csi's.
func VolumeIDFromNQN(nqn string) (volumeID string, ok bool) {
	id, found := strings.CutPrefix(nqn, SubsystemNQNPrefix)
	if !found || ValidateVolumeID(id) != nil {
		return "", false
	}
	return id, true
}

// uuidV5 is RFC 9562 section 5.5: SHA-1 over the namespace and the name,
// truncated to 128 bits, with version 5 and the RFC variant set.
func uuidV5(ns [16]byte, name string) [16]byte {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}

func nguid(volumeID string) [16]byte {
	sum := sha256.Sum256([]byte(nguidLabel + volumeID))
	var n [16]byte
	copy(n[:], sum[:16])
	return n
}

// formatUUID prints 16 bytes as the kernel's %pU does: lowercase hex,
// grouped 8-4-4-4-12, in byte order.
func formatUUID(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], u[10:16])
	return string(b[:])
}
