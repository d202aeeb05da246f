package server

import (
	"context"
	"maps"
	"slices"

	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/fencing"
)

// noteApplied records e as the export the agent made.
func (s *Server) noteApplied(e configfs.Export) {
	s.appliedMu.Lock()
	defer s.appliedMu.Unlock()
	s.applied[e.NQN] = e
}

// forgetApplied records that the agent removed the export of nqn.
func (s *Server) forgetApplied(nqn string) {
	s.appliedMu.Lock()
	defer s.appliedMu.Unlock()
	delete(s.applied, nqn)
}

func (s *Server) appliedExport(nqn string) (configfs.Export, bool) {
	s.appliedMu.Lock()
	defer s.appliedMu.Unlock()
	e, ok := s.applied[nqn]
	return e, ok
}

// ExportsRestored is how many exports RestoreDrift has put back since the
// agent started.
func (s *Server) ExportsRestored() uint64 { return s.restored.Load() }

// RestoreDrift puts back the exports that something other than this agent
// removed from nvmet (nvmetcli clear, another tool, a hand's rmdir): every
// export the agent made, or found at start-up, and has not removed itself,
// whose subsystem is gone or no longer linked to a port. It re-applies
// the export exactly as the agent last made it, the outcome of the last
// call its fencing admitted, and decides nothing new: a volume whose mark
// is not an active lifecycle, or that a call holds, is left alone (the
// call, or the controller's next push, converges it). A connected host
// keeps retrying while its export is gone, so a restore within its
// controller-loss timeout reaches it without an I/O error. It returns the
// number restored; run it every few seconds.
func (s *Server) RestoreDrift(ctx context.Context) (int, error) {
	// What the agent had made is taken before nvmet is read: an export
	// made or changed while Linked runs (a burst's, one every few hundred
	// milliseconds) may be missing from its answer without having
	// drifted, and restore leaves alone one that changed since.
	s.appliedMu.Lock()
	made := maps.Clone(s.applied)
	s.appliedMu.Unlock()
	linked, err := s.nvmet.Linked(ctx)
	if err != nil {
		return 0, err
	}
	restored := 0
	for _, nqn := range slices.Sorted(maps.Keys(made)) {
		if ctx.Err() != nil {
			return restored, ctx.Err()
		}
		e := made[nqn]
		if !drifted(e, linked) {
			continue
		}
		if s.restore(ctx, e) {
			restored++
		}
	}
	return restored, nil
}

// drifted reports whether export e, as the agent made it, is missing from
// what Linked found: no subsystem, or no port link where it had ports.
func drifted(e configfs.Export, linked map[string]int) bool {
	n, ok := linked[e.NQN]
	return !ok || (n == 0 && len(e.Ports) > 0)
}

// restore re-applies e under its volume's lock, if its lifecycle is live.
func (s *Server) restore(ctx context.Context, e configfs.Export) bool {
	id, ok := ownedVolumeID(e.NQN)
	if !ok {
		return false
	}
	log := s.log.With("volume_id", id, "nqn", e.NQN)
	unlock, err := s.locks.tryLock(id, "RestoreDrift")
	if err != nil {
		return false // a call holds the volume and converges it
	}
	defer unlock()
	if cur, ok := s.appliedExport(e.NQN); !ok || !equalApplied(cur, e) {
		return false // a call changed or removed it meanwhile
	}
	m, err := s.marks.Get(ctx, id)
	if err != nil || m == nil || m.Phase != fencing.PhaseActive {
		log.Warn("export removed behind the agent's back is not restored: its lifecycle is not active here", "mark", m, "error", err)
		s.forgetApplied(e.NQN)
		return false
	}
	if err := s.nvmet.Apply(ctx, e); err != nil {
		log.Error("restoring an export removed behind the agent's back failed; retrying at the next check", "error", err)
		return false
	}
	s.noteExport(e.NQN, true)
	s.restored.Add(1)
	log.Warn("restored an export that something else removed from nvmet (nvmetcli clear, another tool?)",
		"ports", len(e.Ports), "allowed_hosts", len(e.AllowedHosts))
	return true
}

// equalApplied compares two exports the agent made.
func equalApplied(a, b configfs.Export) bool {
	return a.NQN == b.NQN && a.Attrs == b.Attrs && slices.Equal(a.Namespaces, b.Namespaces) &&
		slices.Equal(a.Ports, b.Ports) && slices.Equal(a.AllowedHosts, b.AllowedHosts)
}
