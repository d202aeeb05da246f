package server

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/fencing"
	"github.com/pillar-csi/pillar-csi/fencing/grpcstatus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fenced runs act for one volume the way every mutating RPC must: take the
// volume's lock (waiting, while the caller does, for a call that holds
// it), check and advance the volume's durable mark with the request's
// token, and only then act. The store keeps its own per-volume lock while
// act runs (fencing.Store.Do), so no change of an older token can run
// after a newer token was accepted.
//
// Once admitted, act runs to its end even when the caller goes away: its
// context keeps the caller's values but not its cancellation, and is
// bounded by actTimeout instead. A caller's deadline killing lvcreate
// half-way leaves a thin LV in LVM's metadata that its pool does not have
// ("device-mapper: reload ioctl ... failed: No data available" on every
// later activation), so a retried CreateVolume never succeeds; a real
// cluster showed it when a slow storage node took longer than the CSI
// provisioner's timeout. Retries meanwhile wait at the volume's lock and
// see the finished result once it is released.
//
// Waiting for a slot of the store is not running a command, so that wait
// still follows the caller (see detach): a caller whose deadline passes
// while its admitted act queues behind other volumes' commands gets
// DEADLINE_EXCEEDED, and the volume's lock is free for its retry. Were the
// queued act to outlive its caller too, every retry of a busy agent would
// find the volume held until the act reached the head of the queue: a
// hundred concurrent creates, each retried while queued, made provisioning
// 3.5 times slower than one at a time.
//
// A volume without a mark is admitted only if it does not exist (rule 19
// of the fencing table, see exists): a lost marks directory fails closed.
//
// A refused token returns FAILED_PRECONDITION with a FencingRejection
// detail and act never runs. act must return gRPC status errors.
func (s *Server) fenced(ctx context.Context, op, id string, kind fencing.Kind, pt *agentv1.FencingToken, exists fencing.Exists, act func(context.Context) error) error {
	return s.fencedAll(ctx, op, []fence{{key: id, kind: kind, token: pt, exists: exists}}, act)
}

// fence is one lifecycle a call is fenced by: a volume, or a snapshot
// (snapshotKey).
type fence struct {
	// key names the lifecycle in the fencing store and in the agent's
	// locks.
	key    string
	kind   fencing.Kind
	token  *agentv1.FencingToken
	exists fencing.Exists
}

// fencedAll is fenced for a call that changes several lifecycles at once
// (a snapshot and its source, a clone and its source): act runs only when
// every token is admitted, holding every lock. Locks are taken and marks
// checked in the order of their keys, so two such calls never wait for
// each other in a cycle. A token refused after others were admitted
// leaves their marks advanced, as a retry of the same tokens would: a
// token equal to its mark is accepted again.
func (s *Server) fencedAll(ctx context.Context, op string, fs []fence, act func(context.Context) error) error {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b fence) int { return strings.Compare(a.key, b.key) })
	for i, f := range fs {
		if i > 0 && fs[i-1].key == f.key {
			return status.Errorf(codes.InvalidArgument, "%s: %q is named twice", op, f.key)
		}
		unlock, err := s.locks.lock(ctx, f.key, op)
		if err != nil {
			return err
		}
		defer unlock()
	}
	checks := make([]fencing.Check, len(fs))
	for i, f := range fs {
		checks[i] = fencing.Check{VolumeID: f.key, Kind: f.kind, Token: tokenOf(f.token), Exists: f.exists}
	}
	refused, err := s.marks.DoCheckedAll(ctx, checks, func(ctx context.Context) error {
		actx, cancel := detach(ctx)
		defer cancel()
		return act(actx)
	})
	if refused >= 0 {
		// The fencing store holds no lock of the call now: fenceError
		// reads the mark.
		return s.fenceError(ctx, op, fs[refused].key, fs[refused].token, err)
	}
	return err
}

// exists is the check of fencing rule 19 for volume id, asked only when
// the volume has no mark: does its nvmet subsystem exist, or (when b is
// the request's backend) its backend volume? A volume whose name is taken
// by something id does not own is not id's, so it does not count: the
// backend refuses it on its own terms.
func (s *Server) exists(b backends.Backend, id string) fencing.Exists {
	return func(ctx context.Context) (bool, error) {
		ident, err := export.For(id)
		if err != nil {
			return false, err
		}
		if _, ok, err := s.nvmet.ReadSubsystem(ctx, ident.SubsystemNQN); err != nil || ok || b == nil {
			return ok, err
		}
		_, err = b.Get(ctx, id)
		return owned(err)
	}
}

// owned reads the answer of a backend's Get for rule 19: found is owned;
// missing, or taken by something the ID does not own, is not.
func owned(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case backends.IsNotFound(err), backends.IsConflict(err):
		return false, nil
	}
	return false, err
}

// actTimeout bounds an admitted operation once it no longer follows its
// caller's context: a few backend commands (each bounded by
// command.DefaultTimeout) and configfs writes, with room for a slow node.
const actTimeout = 10 * time.Minute

// callerKey is the context key under which detach keeps the caller's
// context.
type callerKey struct{}

// detach returns the context of an admitted act: the caller's values
// without its cancellation, bounded by actTimeout, and carrying the
// caller's context for the waits that may still follow it (waitContext).
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actTimeout)
	return context.WithValue(actx, callerKey{}, ctx), cancel
}

// waitContext is the context a wait that starts nothing follows: the
// caller's where ctx is an admitted act's (detach), ctx itself otherwise.
func waitContext(ctx context.Context) context.Context {
	if c, ok := ctx.Value(callerKey{}).(context.Context); ok {
		return c
	}
	return ctx
}

func tokenOf(pt *agentv1.FencingToken) fencing.Token {
	if pt == nil {
		return fencing.Token{}
	}
	return fencing.Token{UID: pt.GetLifecycleUid(), Generation: pt.GetPublicationGeneration()}
}

// fenceError reports an error of the fencing store's admission. A refusal
// becomes FAILED_PRECONDITION carrying both the api's FencingRejection
// and the fencing module's ErrorInfo, so either kind of client can tell
// it from other failed preconditions. The caller learns the reason and
// its own token, never the volume's mark: a mark's lifecycle UID and
// generation are what a forged token would need, so they stay in this
// log, for the operator on the storage node (and `pillar-agent marks`).
func (s *Server) fenceError(ctx context.Context, op, id string, pt *agentv1.FencingToken, err error) error {
	if !fencing.IsRejected(err) {
		// The full error, with the mark file's path, stays in this log.
		s.log.Error("fencing store failed", "op", op, "volume_id", id, "error", err)
		return toStatus(ctx, op, id, withoutPath(err))
	}
	reason := fencing.RejectionReason(err)
	rej := &agentv1.FencingRejection{Reason: rejectionReason(reason), VolumeId: id}
	if pt != nil {
		rej.Presented = &agentv1.FencingToken{LifecycleUid: pt.GetLifecycleUid(), PublicationGeneration: pt.GetPublicationGeneration()}
	}
	var mark *agentv1.FencingToken
	if reason != fencing.ReasonMarkUnreadable {
		// Reading the mark again is only for the log: it may have moved
		// on since the decision, which is still the newer truth.
		if m, gerr := s.marks.Get(ctx, id); gerr == nil && m != nil {
			mark = &agentv1.FencingToken{LifecycleUid: m.UID, PublicationGeneration: m.Generation}
		}
	}
	s.log.Warn("refused by fencing", "op", op, "volume_id", id, "reason", reason.String(),
		"token", tokenOf(pt).String(), slog.Any("mark", mark), "error", err)
	st, _ := status.FromError(grpcstatus.Error(withoutDetail(err)))
	if withRej, derr := st.WithDetails(rej); derr == nil {
		st = withRej
	}
	return st.Err()
}

// withoutDetail is a refusal as the caller may see it: the operation, the
// volume and the reason. The decision's detail (which names the mark) and
// the mark file's path stay on the storage node.
func withoutDetail(err error) error {
	var fe *fencing.Error
	if !errors.As(err, &fe) {
		return err
	}
	return &fencing.Error{Op: fe.Op, VolumeID: fe.VolumeID, Reason: fe.Reason}
}

// withoutPath is a fencing store's failure as the caller may see it: what
// failed and why, without the mark file's path on the storage node.
func withoutPath(err error) error {
	var fe *fencing.Error
	if !errors.As(err, &fe) || fe.Path == "" {
		return err
	}
	c := *fe
	c.Path = ""
	return &c
}

func rejectionReason(r fencing.Reason) agentv1.FencingRejection_Reason {
	switch r {
	case fencing.ReasonMissingToken:
		return agentv1.FencingRejection_REASON_MISSING_TOKEN
	case fencing.ReasonMalformed:
		return agentv1.FencingRejection_REASON_MALFORMED_TOKEN
	case fencing.ReasonStaleGeneration:
		return agentv1.FencingRejection_REASON_STALE_GENERATION
	case fencing.ReasonLifecycleEnded:
		return agentv1.FencingRejection_REASON_LIFECYCLE_ENDED
	case fencing.ReasonLifecycleReplaced:
		return agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED
	case fencing.ReasonMarkUnreadable:
		return agentv1.FencingRejection_REASON_MARK_UNREADABLE
	case fencing.ReasonUnmarked:
		return agentv1.FencingRejection_REASON_UNMARKED
	}
	return agentv1.FencingRejection_REASON_UNSPECIFIED
}
