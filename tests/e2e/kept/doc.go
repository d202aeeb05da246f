// Package kept keeps a lab cluster up between end-to-end test runs
// (make e2e-up, e2e-run, e2e-down), so that a developer who changes one
// test waits for that test, not for a guest boot, a cluster start and an
// install (about five minutes under TCG) each time.
//
// Three processes take part:
//
//   - the supervisor, on the host (pillar-kept serve, started detached by
//     pillar-kept up): it boots the lab guest with QEMU and waits for it,
//     for at most the kept cluster's lifetime, then kills it;
//   - the keeper, in the guest (pillar-kept guest, the guest's one
//     command): it starts the cluster and the storage pools as the pillar
//     suite's TestMain does, writes the cluster's attach state
//     (cluster.AttachState) and then runs the test binaries the host asks
//     for, one at a time, with -cluster.attach naming that state, until it
//     is asked to stop or its lifetime ends; then it tears the cluster
//     down and the guest powers off;
//   - the client, on the host (pillar-kept up, run, down).
//
// # The channel
//
// Host and guest talk through files in one directory of the run's output
// share (Channel): the share is mounted in the guest without caching, so
// what either side writes the other sees at once, whereas the guest's view
// of the host root is cached and may miss files made after its boot. The
// host writes a request (req-ID.json) and the test binary it compiled
// (req-ID.test) there; the keeper appends the binary's output to
// req-ID.log, which the client follows, and answers with req-ID.status.
// Every file whose appearance means something is written under another
// name and renamed, so that neither side reads half of one.
//
// # The host's state
//
// One kept cluster per lab cache: its state (State, in the cache's kept/
// directory) names the supervisor's and QEMU's processes and the run
// directory. A state whose QEMU is gone is stale (the guest died or was
// killed); up and down clear it, run refuses it.
package kept
