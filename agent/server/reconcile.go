package server

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"sync"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/fencing"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reconcile converges the node's exports to the full desired set: each
// desired export under its own token, as ExportVolume followed by the
// exact access list; then the pillar-owned exports the request omits are
// removed only where the agent itself can prove they are dead.
func (s *Server) Reconcile(ctx context.Context, req *agentv1.ReconcileRequest) (*agentv1.ReconcileResponse, error) {
	const op = "Reconcile"
	listed := map[string]bool{}
	for _, d := range req.GetExports() {
		if listed[d.GetVolumeId()] {
			return nil, status.Errorf(codes.InvalidArgument, "%s: volume %q is listed more than once", op, d.GetVolumeId())
		}
		listed[d.GetVolumeId()] = true
	}

	resp := &agentv1.ReconcileResponse{Results: make([]*agentv1.ReconcileResult, len(req.GetExports()))}
	sem := make(chan struct{}, s.workers)
	var wg sync.WaitGroup
	for i, d := range req.GetExports() {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			resp.Results[i] = s.reconcileOne(ctx, d)
		}()
	}
	wg.Wait()
	if req.GetPartial() {
		// More batches follow; the last one sweeps.
		s.log.Info("reconciled a batch", "desired", len(resp.Results), "failed", failedOf(resp))
		return resp, nil
	}

	st, err := s.nvmet.Read(ctx)
	if err != nil {
		return nil, toStatus(ctx, op, "", err)
	}
	// One full read serves both the sweep and the export count: the
	// sweep un-notes what it removes. A read costs a few configfs files
	// per subsystem, which adds up at hundreds of exports.
	s.noteExports(st)
	for _, sub := range st.Subsystems {
		id, owned := ownedVolumeID(sub.NQN)
		if !owned || listed[id] {
			continue // not ours, or converged above
		}
		if s.reconcileUnlisted(ctx, id, sub) {
			resp.RemovedSubsystemNqns = append(resp.RemovedSubsystemNqns, sub.NQN)
		} else {
			resp.RetainedSubsystemNqns = append(resp.RetainedSubsystemNqns, sub.NQN)
		}
	}
	s.log.Info("reconciled", "desired", len(resp.Results), "failed", failedOf(resp),
		"removed", len(resp.RemovedSubsystemNqns), "retained", len(resp.RetainedSubsystemNqns))
	return resp, nil
}

// failedOf counts the entries of resp that did not converge.
func failedOf(resp *agentv1.ReconcileResponse) int {
	var failed int
	for _, r := range resp.Results {
		if r.Code != int32(codes.OK) {
			failed++
		}
	}
	return failed
}

func (s *Server) reconcileOne(ctx context.Context, d *agentv1.DesiredExport) *agentv1.ReconcileResult {
	r := &agentv1.ReconcileResult{VolumeId: d.GetVolumeId()}
	e, err := s.export(ctx, "Reconcile", exportArgs{
		id: d.GetVolumeId(), store: d.GetStore(), nqn: d.GetSubsystemNqn(), tcp: d.GetNvmeofTcp(),
		token: d.GetFencingToken(), hosts: d.GetAllowedHostNqns(), exactHosts: true,
	})
	if err != nil {
		st, _ := status.FromError(err)
		r.Code, r.Message = int32(st.Code()), st.Message()
		if rej, ok := agentv1.FencingRejectionOf(err); ok {
			r.FencingRejection = rej
		}
		return r
	}
	r.Export = e
	return r
}

// reconcileUnlisted decides the fate of a pillar-owned export the desired
// set omits, and reports whether it was removed. A request carries no
// token for what it omits, so omission alone proves nothing (the
// controller may be stale); the export goes only when the agent's own
// records show it is dead: the volume's mark is a tombstone, or the
// namespace's backing device no longer exists. An unreadable mark, a
// volume busy with another call, or a failed removal keeps it.
func (s *Server) reconcileUnlisted(ctx context.Context, id string, sub configfs.Subsystem) bool {
	log := s.log.With("volume_id", id, "nqn", sub.NQN)
	unlock, err := s.locks.tryLock(id, "Reconcile")
	if err != nil {
		log.Info("unlisted export retained: another call holds the volume")
		return false
	}
	defer unlock()
	m, err := s.marks.Get(ctx, id)
	if err != nil {
		log.Warn("unlisted export retained: mark unreadable", "error", err)
		return false
	}
	ended := m != nil && m.Phase == fencing.PhaseEnded
	gone := !ended && s.deviceGone(sub)
	if !ended && !gone {
		log.Info("unlisted export retained: its lifecycle is live")
		return false
	}
	if err := s.nvmet.Remove(ctx, sub.NQN); err != nil {
		log.Error("removing a dead unlisted export failed", "error", err)
		return false
	}
	s.noteExport(sub.NQN, false)
	s.forgetApplied(sub.NQN)
	log.Info("unlisted export removed", "lifecycle_ended", ended, "device_gone", gone)
	return true
}

// deviceGone reports whether every namespace of the subsystem names a
// device path that does not exist: the backend volume was destroyed
// behind the agent's back. A namespace without a path proves nothing.
func (s *Server) deviceGone(sub configfs.Subsystem) bool {
	if len(sub.Namespaces) == 0 {
		return false
	}
	return !slices.ContainsFunc(sub.Namespaces, func(ns configfs.Namespace) bool {
		if ns.DevicePath == "" || ns.DevicePath == "(null)" {
			return true
		}
		_, err := os.Stat(ns.DevicePath)
		return !errors.Is(err, fs.ErrNotExist)
	})
}
