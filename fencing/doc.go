// Package fencing implements pillar-csi's stale-operation fencing: tokens,
// the rules that accept or refuse a request against a volume's durable
// mark, and the on-disk store of those marks.
//
// Nothing a stale controller sends may ever change a volume. Every call that
// changes a volume's resources carries a Token: the lifecycle UID (the
// metadata.uid of the volume's PillarVolumeState, random for every new
// object) and the publicationGeneration the controller advanced by
// compare-and-swap before sending. The storage agent asks its Store to check
// the token against the volume's mark and advance the mark, durably, before
// it touches the volume:
//
//	if _, err := store.Advance(ctx, volumeID, tok); err != nil {
//		return err // refused (FAILED_PRECONDITION) or not durable
//	}
//
// # Lifecycles
//
// A lifecycle begins with the first accepted request of a new UID and ends
// with an accepted End (DeleteVolume), which turns the mark into a tombstone
// and adds the UID to the mark's history of ended lifecycles. An ended
// lifecycle is never admitted again.
//
// A new lifecycle for the same volume ID is admitted only when the mark is a
// tombstone (or absent) and the UID is not one that ended. UIDs are random,
// so the store cannot order two of them; instead it relies on one contract
// with the controller: a PillarVolumeState is finally deleted only after the
// agent accepted its End, so by the time a new object (new UID) for the same
// volume exists, every earlier lifecycle has ended here and is remembered as
// ended. An unknown UID while another lifecycle is active therefore breaks
// that contract (an End lost, a finalizer removed by hand) and is refused
// (LIFECYCLE_REPLACED) rather than allowed to take the volume over.
//
// # Decision table
//
// Rules are applied in order; the first that matches decides. U and G are the
// mark's lifecycle UID and generation, u and g the token's. "History" is the
// mark's list of ended lifecycles, "retired" the store's ledger of
// lifecycles moved out of retired marks. A refused request never changes the
// mark. An accepted request whose mark changes is written durably before the
// request may proceed.
//
//	rule  mark                request                          outcome               mark afterwards
//	 1    any                 no token (zero Token)             MISSING_TOKEN         unchanged
//	 2    any                 bad kind, volume ID or UID        MALFORMED             unchanged
//	 3    unreadable/corrupt  any                               MARK_UNREADABLE       unchanged, never overwritten
//	 4    none                u retired                         LIFECYCLE_ENDED       none
//	 5    none                mutate                            accept                active(u, g)
//	 6    none                end                               accept                ended(u, g), history+u
//	 7    active(U, G)        u = U, g < G                      STALE_GENERATION      unchanged
//	 8    active(U, G)        u = U, g >= G, mutate             accept                active(U, g)
//	 9    active(U, G)        u = U, g >= G, end                accept                ended(U, g), history+U
//	10    active(U, G)        u != U, u in history or retired   LIFECYCLE_ENDED       unchanged
//	11    active(U, G)        u != U, otherwise                 LIFECYCLE_REPLACED    unchanged
//	12    ended(U, G)         u = U, mutate                     LIFECYCLE_ENDED       unchanged
//	13    ended(U, G)         u = U, g < G, end                 STALE_GENERATION      unchanged
//	14    ended(U, G)         u = U, g >= G, end                accept (end retried)  ended(U, g)
//	15    ended(U, G)         u != U, u in history or retired   LIFECYCLE_ENDED       unchanged
//	16    ended(U, G)         u != U, otherwise, mutate         accept (new)          active(u, g)
//	17    ended(U, G)         u != U, otherwise, end            accept (new, ended)   ended(u, g), history+u
//	18    any                 accepted above, g > B + MaxGenerationStep   MALFORMED   unchanged
//	19    none                accepted by 5 or 6, the volume's resources exist   UNMARKED   none
//
// Rule 18 turns an acceptance by rules 5 to 17 into a refusal: B is G when
// the mark's lifecycle is u, else 0. It bounds how far one request can move a lifecycle's
// generation, so that no request can make every later one of its
// lifecycle stale (generation 2^64-1).
//
// Rule 19 makes a missing mark fail closed. Rules 5 and 6 admit the first
// lifecycle of a volume ID, which is right for a volume that does not
// exist yet, and wrong for one whose mark was lost (a wiped or replaced
// directory, a disk that was not mounted): any token would then own it,
// and a made-up DeleteVolume would destroy it. Only the caller knows
// whether a volume's resources exist, so Store.DoChecked asks it, under the
// volume's lock and only when there is no mark. Store.Adopt is the
// operator's way back: it writes the mark of the lifecycle the cluster's
// record names, and only where there is none.
//
// An equal generation is accepted (rules 8 and 14), so a retried request is
// idempotent; it writes nothing. It also lets one caller present one token
// to several calls of one operation (pillar-controller's CreateVolume, to
// the create and the export): a token is safe as long as it is never
// handed to two callers, and a newer token admitted in between refuses the
// rest. Generations are compared only within one
// lifecycle: a new lifecycle may start at any generation up to
// MaxGenerationStep (rule 16). Rule 14
// lets a controller retry a DeleteVolume whose storage deletion failed after
// End; rule 12 keeps every other call of that lifecycle out. Rule 6 matters
// for a lifecycle whose create never reached the agent: its End still leaves
// a tombstone, so the create, arriving late, is refused. The Store applies
// rules 1 and 2 before it reads the mark, and rule 3 when it reads it;
// Decide implements rules 1, 2 (for the token and kind) and 4 to 18 as a
// pure function, and Store.DoChecked adds rule 19. No rule depends on the
// clock.
//
// # Retirement
//
// Tombstones of long-deleted volumes are retired by Store.Retire, only after
// a configurable grace since the lifecycle ended. Before a mark file is
// removed, every lifecycle it lists is written durably to the store's ledger
// of retired lifecycles, as a 16-byte fingerprint of (volume ID, UID). The
// guarantee that remains after retirement is exactly the one before: a
// request from any lifecycle that ever ended on this store is refused, for
// ever (rules 4, 10 and 15). What retirement gives up is the ended lifecycle's
// generation and the acceptance of its End retries (rule 14): after the
// grace those are refused with LIFECYCLE_ENDED, which a controller may read
// as "already deleted". A UID that comes back after its tombstone is retired
// finds its fingerprint in the ledger and is refused. The ledger costs
// 16 bytes per ended lifecycle; a fingerprint collision could only refuse a
// new lifecycle (fail closed), never admit an old one. The grace only
// decides how long End retries stay idempotent, so a clock that jumps ahead
// cannot weaken fencing either. The same ledger takes
// the oldest history entries of a mark that would list more than
// Options.HistoryLimit ended lifecycles.
//
// # Durable marks
//
// A Store keeps one file per volume in one directory (DefaultDir on a
// storage node). Files are replaced atomically with
// github.com/google/renameio/v2 (temporary file in the same directory,
// fsync, rename) followed by an fsync of the directory, so after a crash,
// even a SIGKILL in the middle of a write, a mark holds either its old or
// its new value, never a torn one. Each file carries a magic, a format
// version, its volume ID and a CRC-32C; a file that fails to decode is
// refused (MARK_UNREADABLE) and left untouched: the store fails closed and
// never treats a damaged mark as "no mark". FileName maps any volume ID
// (1..128 arbitrary bytes) to a safe, injective and reversible file name of
// lower-case letters, digits and "-_.", so no two marks collide even on a
// case-insensitive filesystem. The directory also holds the store's
// identity (IdentityFileName, Store.ID), drawn when the store is first
// opened, so that a lost directory replaced by an empty one can be told
// from the store it replaced.
//
// # Operator recovery
//
// Two refusals need an operator, because they mean that the store holds
// something the cluster no longer agrees with, and the store cannot tell
// which side is right. The functions for them take the operator's word
// for what the cluster holds, check it against what is on disk, and refuse
// (ErrRecoveryRefused) anything that could let a stale lifecycle write
// again. Each has a dry run.
//
//   - LIFECYCLE_REPLACED for every new lifecycle: the mark's active
//     lifecycle U was deleted in the cluster without its End reaching the
//     store. Store.EndLifecycle ends U, named explicitly and only if it is
//     the mark's, exactly as an accepted End at the mark's generation
//     would (rule 9); the new lifecycle is then admitted by rule 16 and U
//     is refused for ever. A mark is never switched to another UID.
//   - MARK_UNREADABLE: Store.ResetMark replaces a damaged mark with one
//     for the lifecycle and generation the operator reads from the
//     cluster, after keeping the damaged file under DamagedDir and adding
//     every lifecycle it can still read from it to the ledger. Its
//     documentation states what stays refused and what the lost history
//     gives up; the loss must be accepted explicitly.
//   - UNMARKED: the volume exists on the storage node but its mark was
//     lost (rule 19). Store.Adopt writes the mark of the lifecycle and
//     generation the operator reads from the cluster, only where no mark
//     file exists and only for a lifecycle the ledger does not list.
//   - A ledger that cannot be read makes Open fail. ResetLedger keeps every
//     whole record of it (the format has one checksum for the whole file,
//     so a damaged record cannot be told from an intact one, and keeping a
//     damaged one only refuses a lifecycle that never existed); the
//     records that were damaged or cut off are lost, which must be
//     accepted explicitly.
//
// Inspect and InspectMark read a directory without its lock, for listing
// while an agent runs; every file is replaced by rename, so each is read
// whole. Everything that writes holds the directory's lock, so it runs
// only while no agent does.
//
// # Concurrency
//
// Check-and-advance is atomic per volume: requests for one volume are
// decided one at a time, each against the mark its predecessor left, while
// requests for different volumes proceed in parallel. Store.Do also runs
// the caller's change under the volume's lock, so that no change of an
// older token runs after a newer one was accepted. Between processes, Open
// takes an exclusive flock(2) on the directory; a second store on the same
// directory (another agent process, or a second Open in this one) waits and
// then fails with ErrLocked. The kernel drops the lock when its holder dies.
// The directory must be on a local filesystem: flock and rename atomicity
// are not guaranteed on network filesystems.
//
// # Dependencies
//
// The package depends only on the Go standard library, golang.org/x/sys and
// github.com/google/renameio/v2, takes no Kubernetes dependency and no
// dependency on other pillar-csi modules, so any storage agent can import it
// on its own. Tokens, Decide and the file-name mapping work on every
// platform; the Store needs flock and atomic rename (Linux, the BSDs,
// macOS, Solaris) and refuses to open elsewhere. The subpackage grpcstatus
// maps the store's errors to gRPC status codes.
package fencing
