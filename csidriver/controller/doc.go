// Package controller is the CSI Controller service of pillar-controller,
// kept on PillarVolumeState, the durable record of each volume.
//
// # The record first
//
// CreateVolume writes the PillarVolumeState (name = volume ID, a finalizer,
// store, protocol, capacity, and the export spec copied from the
// PillarProtocol) before it asks an agent for anything; once the agent
// confirmed the backend volume and its export, both are recorded in status
// with one write (an export that fails after the create records the create
// alone). A retry after a crash at any point reads the record and runs only
// what it does not show as done; every agent call is idempotent.
// DeleteVolume marks the record deleted, removes the export, has the agent
// delete the backend volume — which ends the volume's lifecycle in the
// agent's fencing mark — and only then removes the finalizer. A
// CreateVolume that meets a record being deleted finishes that first. A
// volume the backend rounds past the requested limit is rolled back
// (OUT_OF_RANGE), because no CO deletes a volume whose creation failed.
//
// # Fencing tokens
//
// Before the agent calls of a CSI call that changes a volume, the service
// advances spec.publicationGeneration with a compare-and-swap: an update carrying
// the resourceVersion the record was read at. The API server accepts one
// update per resourceVersion, so no two callers — two replicas, or a
// deposed leader and its successor — are ever handed the same generation;
// the loser of a race reads the record again and decides again. The token
// sent is (the record's UID, the new generation); an agent refuses any
// token older than its durable mark, so a stale controller can change
// nothing. A new record is created at generation 1, the creating call's
// own: only one create of a name succeeds, as only one update of a
// resourceVersion does. One token serves all the agent calls of one CSI
// call (CreateVolume's create and export): no other call or retry is ever
// handed it, which is all fencing needs (docs/architecture.md, "One token
// per CSI call"); from a claim to a published volume the record is written
// three times (TestRecordWrites). Decisions read the record from the API
// server, except that ControllerPublishVolume starts from the informer
// cache (retryingCached): a lagging record loses the compare-and-swap that
// comes before any agent call, and a step that fails on a cached record
// is decided again on fresh reads. A new volume's record is written
// before anything is read, and an existing one is read as a retry reads
// it.
//
// # Publications
//
// ControllerPublishVolume records the publication (node ID
// "<node name>/<host NQN>", access mode, read-only) in the same
// compare-and-swap that issues its token, then allows the node's host NQN
// on the subsystem; a read-write publication excludes every other one
// (FAILED_PRECONDITION naming the node that holds it), readers may be many,
// and the same node with another mode or read-only flag is ALREADY_EXISTS.
// A node whose host NQN another node's CSINode presents too is refused
// (FAILED_PRECONDITION): the storage node could not tell them apart.
// ControllerUnpublishVolume denies the host first and removes the
// publication after; a host NQN that another publication still has stays
// allowed.
//
// # Recovery
//
// After a new agent instance (a restart, a storage-node reboot),
// PushExports sends the desired export of every exported volume on that
// agent's stores to the agent's Reconcile RPC, with the allowed hosts of
// its publications, each entry under a fresh token. VolumeStateReconciler
// keeps the ExportSpecMissing condition of records without an export spec
// (legacy volumes: the controller never guesses bindAddress, port or
// aclEnabled; once the operator states them, the next call resumes, the
// export included), and rolls back a provisioning that never completed
// once its claim is gone and no PersistentVolume holds it — never a volume
// that has a PV. It decides from the informer cache that a record needs
// nothing (waiting for its export, or exported), which is nearly every
// record of a burst of claims, and reads the API server only for a record
// it acts on.
//
// # Rules without a server
//
// The rules above are plain functions in decisions.go: which capabilities
// are served and the access mode each maps to, whether an existing record
// answers a repeated CreateVolume, what a ControllerPublishVolume asks for,
// whether the record can take a publication and admits it (exclusivity),
// whether another node presents the same host NQN, which hosts an
// unpublication denies, and which exports a recovery pushes, with which
// allowed hosts. They take the record and the request as values and return
// a decision or the very status error the call returns, and do no I/O, so
// decisions_test.go proves them in tables with no API server or agent
// (go test -run 'TestAdmit|TestUnpublish' needs nothing). The tests that
// run the service against a real kube-apiserver prove that the handlers
// apply them to records, under the compare-and-swap, CEL rules and RBAC
// that only the server has.
//
// # Events
//
// Provisioned, Published, Unpublished, FencingRefused, ExportSpecMissing,
// ExportSpecStated and ProvisioningAbandoned are recorded on the
// PillarVolumeState and, when the volume was created for a claim that still
// exists (the external-provisioner's --extra-create-metadata names it), on
// that PersistentVolumeClaim as well, so `kubectl describe pvc` shows them.
//
// Calls for one volume are serialized per controller (a second gets
// ABORTED); across controllers the compare-and-swap orders them.
package controller
