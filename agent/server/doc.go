// Package server implements pillar.agent.v1.AgentService, the gRPC service
// of pillar-agent: it runs the ZFS and LVM backends of the stores named in
// each request and exports their volumes over NVMe-oF/TCP by writing the
// kernel's nvmet configfs tree.
//
// # Fencing
//
// Every call that changes a volume follows one path (Server.fenced):
// validate the request (INVALID_ARGUMENT, nothing touched) → take the
// volume's lock (waiting, while the caller does, for a call that holds it) → check
// and advance the volume's durable mark in the fencing.Store → act. A
// refused token gets FAILED_PRECONDITION with a FencingRejection detail
// (api/agent/v1) and an ErrorInfo (fencing/grpcstatus), and nothing is
// touched. CreateVolume, ExpandVolume, ExportVolume, UnexportVolume,
// AllowHost, DenyHost and each Reconcile entry advance the mark
// (fencing.KindMutate); DeleteVolume ends the lifecycle (fencing.KindEnd)
// before it destroys anything, and a retry with the same token finishes a
// deletion that failed half-way.
//
// A snapshot has a lifecycle of its own, marked under the key
// "snapshot/<snapshot ID>" (no volume ID contains '/'). A call that
// changes two lifecycles is fenced by both tokens in one step
// (Server.fencedAll: locks and marks in key order, act only when both are
// admitted): CreateSnapshot by the source volume's and the snapshot's,
// CreateVolume with a content source by the new volume's and the
// snapshot's or source volume's. DeleteSnapshot ends the snapshot's
// lifecycle, so a stale controller can neither restore a deleted snapshot
// nor take a new one under its ID. Deleting a volume ends only its own
// lifecycle: its snapshots and the volumes made from it keep theirs, and
// the backend keeps what they still need (backends.Snapshotter).
//
// # Exports
//
// A volume's export is one subsystem named by export.For(volumeID)'s NQN,
// with one namespace (NSID 1) on the volume's block device carrying the
// derived UUID and NGUID, model "pillar-csi" and a serial derived from the
// NGUID, linked to the TCP port of the request's address (ports are shared
// between subsystems by the configfs module). A subsystem is pillar-owned
// exactly when its NQN has export.SubsystemNQNPrefix followed by a valid
// volume ID; the agent lists, reconciles and removes only those.
//
// Reconcile converges every desired export as ExportVolume plus the exact
// access list would, each under its own token. A pillar-owned export the
// request omits is removed only when its mark is a tombstone (the
// lifecycle ended) or its namespace's device no longer exists (the backend
// volume is gone); otherwise it is retained and reported, so a stale
// controller's partial view never unexports a live volume.
//
// # Idempotency and failures
//
// Every RPC converges to the state its request describes and succeeds
// when that state already holds. A failed export of a subsystem that did
// not exist before is removed again; a failed change of an existing export,
// or a create the backend may have half-done (a killed command), is
// completed by the identical retry, because the backends and
// configfs.Apply converge from any state. Backend, configfs and fencing
// errors become gRPC codes in one function (toStatus).
//
// # Stores
//
// The agent keeps no store configuration: each request carries its store.
// One backend object is kept per distinct store configuration for the
// life of the agent, so the backend's own space accounting (thin
// admission under the overcommit rule) sees every call for the store. An
// LVM thin pool that does not zero the chunks it provisions is refused by
// GetCapacity and CreateVolume (FAILED_PRECONDITION with a StoreRefusal
// detail) unless the request's LvmStore sets allow_unzeroed_thin_pool.
package server
