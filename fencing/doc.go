// Package fencing implements pillar-csi's stale-operation fencing: tokens,
// the rules that accept or reject a request against a volume's durable
// mark, and the on-disk store of those marks.
//
// A token is a volume lifecycle UID plus a publication generation. The agent
// checks and advances a per-volume mark before any mutating call changes a
// volume, so nothing a stale controller sends can change it.
//
// Allowed dependencies: the Go standard library, golang.org/x/sys and
// github.com/google/renameio/v2. The module takes no Kubernetes dependency
// and no dependency on other pillar-csi modules, so any storage agent can
// import it on its own.
package fencing
