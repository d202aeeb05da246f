// Package marks is the operator's command for the fencing marks of a
// storage node, run as "pillar-agent marks COMMAND": list and show read
// the marks (without the directory's lock, so beside a running agent);
// retire, end, reset and reset-ledger change them through the fencing
// store's own functions (fencing.Store.Retire, EndLifecycle, ResetMark and
// fencing.ResetLedger), under the directory's lock, so only while no agent
// runs on the node, and only with -yes: without it they say what they
// would do.
//
// ParseArgs turns the arguments after "marks" into Options and Run runs
// them; cmd/pillar-agent is those two calls. The procedures, and why none
// of the commands can let a stale lifecycle write again, are in the
// documentation of package app, section "Fencing marks".
package marks
