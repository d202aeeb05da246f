package agentv1

// MaxMessageSize is the largest request or response pillar-agent accepts
// or sends: 4 MiB, gRPC's default for receiving. A client keeps each
// request below it, and below it with room for its response, whose size
// follows the request's: Reconcile is sent in batches
// (ReconcileRequest.Partial) for a node with more exports than fit.
const MaxMessageSize = 4 << 20

// MaxListPageSize is the most entries one ListVolumes or ListExports
// response holds; a request may ask for fewer. The agent also ends a page
// early when its entries reach three quarters of MaxMessageSize (an
// export allowed to many hosts is large), so a page always fits.
const MaxListPageSize = 1000

// SnapshotFencingKeyPrefix starts the key of a snapshot's lifecycle in the
// agent's fencing store, and so FencingRejection.volume_id when a
// snapshot's token is refused: "snapshot/" and the snapshot ID. No volume
// ID contains '/', so a snapshot's mark never meets a volume's.
const SnapshotFencingKeyPrefix = "snapshot/"

// MaxSnapshotIDLength is the longest snapshot ID the agent accepts: with
// SnapshotFencingKeyPrefix it must fit the fencing store's 128-byte keys.
const MaxSnapshotIDLength = 128 - len(SnapshotFencingKeyPrefix)
