// Package keylock is the per-key lock every pillar-csi service takes
// before it works on a volume: one operation at a time per key, no lock
// over all keys, so calls for different volumes run in parallel.
//
// A caller chooses, per call, what a busy key means:
//
//   - TryLock refuses at once and names the operation holding the key. The
//     CSI services turn that into ABORTED, which the CO retries with
//     backoff (CSI spec, "Concurrency").
//   - Lock waits for the holder to let go, for as long as the caller's
//     context lasts. The agent uses it: the holder is usually the same
//     request retried by a controller that gave up waiting, and a wait
//     turns the retry into a quick idempotent answer.
//
// The package lives in the api module because it is the one module that
// both pillar-csi's csidriver and agent modules already require and that
// may carry more than the standard library; fencing and configfs stay
// reusable libraries with no code of the services in them. keylock itself
// needs only the standard library, and it knows nothing about gRPC: the
// callers build their own status errors from what it reports, so each
// keeps the code and message its clients already see.
package keylock
