// Package export is the identity contract between pillar-agent, which
// exports a volume, and pillar-node, which must find that volume's block
// device on a worker: every identifier of an NVMe-oF export is derived from
// the CSI volume ID alone, with the functions of this package, so both sides
// compute the same values without asking each other.
//
// For a volume ID v (see ValidateVolumeID):
//
//   - the subsystem NQN is SubsystemNQNPrefix + v, one subsystem per
//     volume. The prefix also marks a subsystem as pillar-owned: the agent
//     never touches a subsystem whose NQN lacks it.
//   - the subsystem has exactly one namespace, NamespaceID (1).
//   - the namespace UUID is a name-based (version 5, RFC 9562) UUID of v in
//     the namespace PillarUUIDNamespace. nvmet gives every new namespace a
//     random UUID, so the agent must write this one to the namespace's
//     device_uuid before enabling it, or the identity would change on every
//     re-export (after a storage-node reboot, for example).
//   - the namespace NGUID is the first 16 bytes of SHA-256 over a fixed
//     label and v, written to device_nguid.
//
// UUID and NGUID use the text form both nvmet's configfs and the initiator's
// sysfs print (lowercase 8-4-4-4-12 hex, the kernel's %pU), so the node finds
// its device by comparing /sys/block/nvme*n*/uuid with Identity.UUID, never
// by the order of nvmeXnY names. Derivation uses the volume ID only, not the
// lifecycle: a volume ID is never reused while an older volume with the same
// ID still exists, because the PillarVolumeState named after the ID exists
// until the old volume is gone.
//
// The package also holds the rest of the controller⇄node contract: the
// keys of the CSI volume context the controller sets and the node reads
// (ParseVolumeContext, VolumeContext.Map), and the node ID format, which
// carries the worker's Kubernetes node name and host NQN (NodeID,
// FormatNodeID, ParseNodeID).
//
// Every function is pure and needs no I/O; invalid input gets an *Error that
// wraps ErrInvalidVolumeID, ErrInvalidNQN, ErrInvalidVolumeContext or
// ErrInvalidNodeID.
package export
