package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// errLostRace is returned by issue when another writer changed the record
// since it was read: the caller reads it again and decides again.
var errLostRace = errors.New("the PillarVolumeState changed while this call was deciding")

// maxRaces bounds how often one call re-reads and re-decides after losing
// a compare-and-swap before it gives up with ABORTED (the CO retries).
const maxRaces = 8

// issue advances v's publicationGeneration with a compare-and-swap (an
// update that carries the resourceVersion v was read at) and returns the
// fencing token of the new generation. Two callers can never be handed the
// same generation: the API server accepts only one update per
// resourceVersion. On success v is the updated record.
func (s *Service) issue(ctx context.Context, v *v1alpha1.PillarVolumeState) (*agentv1.FencingToken, error) {
	v.Spec.PublicationGeneration++
	if err := s.cfg.Client.Update(ctx, v); err != nil {
		v.Spec.PublicationGeneration--
		if apierrors.IsConflict(err) {
			return nil, errLostRace
		}
		if apierrors.IsNotFound(err) {
			return nil, errorf(codes.NotFound, v.Name, "the PillarVolumeState was deleted")
		}
		return nil, errorf(codes.Unavailable, v.Name, "advancing publicationGeneration: %v", err)
	}
	return tokenOf(v), nil
}

func tokenOf(v *v1alpha1.PillarVolumeState) *agentv1.FencingToken {
	return &agentv1.FencingToken{LifecycleUid: string(v.UID), PublicationGeneration: uint64(v.Spec.PublicationGeneration)}
}

// retrying runs step with a fresh read of volume id until it stops losing
// races; step returns errLostRace to be run again. A nil record is passed
// on as nil.
func (s *Service) retrying(ctx context.Context, id string, step func(v *v1alpha1.PillarVolumeState) error) error {
	return s.retryingFrom(ctx, id, nil, step)
}

// retryingCached is retrying whose first round reads the record from the
// informer cache (Config.Client) instead of the API server. A cache may
// lag: a lagging record cannot change anything, because every step
// compare-and-swaps the record before its first agent call and loses that
// race, and a step that fails on it for any other reason (a record not in
// the cache yet, a publication already gone) is decided again on fresh
// reads, as retrying does. Only a step that succeeded on the cached
// record is spared the read.
func (s *Service) retryingCached(ctx context.Context, id string, step func(v *v1alpha1.PillarVolumeState) error) error {
	var v v1alpha1.PillarVolumeState
	if err := s.cfg.Client.Get(ctx, types.NamespacedName{Name: id}, &v); err == nil {
		if err := step(&v); err == nil {
			return nil
		}
	}
	return s.retrying(ctx, id, step)
}

// retryingFrom is retrying whose first round is given first, when it is
// not nil, instead of a read: a record this call has just written.
func (s *Service) retryingFrom(ctx context.Context, id string, first *v1alpha1.PillarVolumeState, step func(v *v1alpha1.PillarVolumeState) error) error {
	for range maxRaces {
		v := first
		if first = nil; v == nil {
			var err error
			if v, err = s.getVolume(ctx, id); err != nil {
				return err
			}
		}
		if err := step(v); !errors.Is(err, errLostRace) {
			return err
		}
	}
	return errorf(codes.Aborted, id, "lost %d races for the PillarVolumeState in a row; retry", maxRaces)
}

// agentError maps an agent's error and counts fencing refusals. A
// refusal's tokens go to this log only: the event and the CSI error
// reach the claim, which a tenant reads.
func (s *Service) agentError(v *v1alpha1.PillarVolumeState, what string, err error) error {
	mapped := mapAgentError(v.Name, what, err)
	if rej, ok := agentv1.FencingRejectionOf(err); ok {
		s.cfg.Metrics.fencingRejected(rej.GetReason())
		s.log.Warn("refused by the agent's fencing", "volume_id", v.Name, "call", what, "reason", rej.GetReason().String(),
			"presented_uid", rej.GetPresented().GetLifecycleUid(), "presented_generation", rej.GetPresented().GetPublicationGeneration(),
			"record_uid", string(v.UID))
		s.event(v, corev1.EventTypeWarning, v1alpha1.ReasonFencingRefused, "%s", status.Convert(mapped).Message())
	}
	return mapped
}

// withoutHost replaces the host NQN nqn in err's message with who: an
// agent's refusal of AllowHost or DenyHost may quote the NQN (a configfs
// path, a validation message), and ControllerPublishVolume's and
// ControllerUnpublishVolume's errors reach the pod's events, which tenants
// read. The code and details stay.
func withoutHost(err error, nqn, who string) error {
	st, ok := status.FromError(err)
	if !ok || nqn == "" || !strings.Contains(st.Message(), nqn) {
		return err
	}
	p := st.Proto()
	p.Message = strings.ReplaceAll(p.Message, nqn, who)
	return status.ErrorProto(p)
}

// mapAgentError maps an agent's error to the CSI error of a call on volume
// id. A fencing refusal is FAILED_PRECONDITION with its reason, and no
// token: it means another controller (or a later call) has moved the
// volume on, and is never retried blindly.
func mapAgentError(id, what string, err error) error {
	return mapAgentErrorFor("volume", id, what, err)
}

// mapAgentErrorFor is mapAgentError for a call on kind ("volume",
// "snapshot") id.
func mapAgentErrorFor(kind, id, what string, err error) error {
	if rej, ok := agentv1.FencingRejectionOf(err); ok {
		of := ""
		if k := rej.GetVolumeId(); k != "" && k != id {
			// The other lifecycle of the call: a restore's snapshot, a
			// clone's or a snapshot's source.
			of = " for " + k
		}
		return status.Errorf(codes.FailedPrecondition, "%s %s: %s refused by the agent's fencing (%s)%s; "+
			"a newer operation or another controller has taken it over, or it has ended (pillar-controller's and the agent's logs name the tokens)",
			kind, id, what, rej.GetReason(), of)
	}
	st := status.Convert(err)
	code := st.Code()
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted, codes.Aborted,
		codes.NotFound, codes.AlreadyExists, codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
	case codes.Unimplemented:
		// The agent lacks the backend's tools, or is too old for the
		// call: the volume cannot be served until the node is fixed.
		code = codes.FailedPrecondition
	default:
		code = codes.Internal
	}
	return status.Error(code, fmt.Sprintf("%s %s: %s: %s", kind, id, what, st.Message()))
}

// lostOr maps the error of a PillarVolumeState write: a conflict is a lost
// race, anything else UNAVAILABLE.
func lostOr(err error, id, what string) error {
	if apierrors.IsConflict(err) {
		return errLostRace
	}
	if apierrors.IsNotFound(err) {
		return errorf(codes.NotFound, id, "the PillarVolumeState was deleted")
	}
	return errorf(codes.Unavailable, id, "%s: %v", what, err)
}

// subsystemNQN is the NQN of the volume's subsystem: the one the record
// states, or (when it states none, as records of early releases do) the
// one api/export derives from the volume ID.
func subsystemNQN(v *v1alpha1.PillarVolumeState) string {
	if v.Spec.Export != nil && v.Spec.Export.SubsystemNQN != "" {
		return string(v.Spec.Export.SubsystemNQN)
	}
	if id, err := export.For(v.Name); err == nil {
		return id.SubsystemNQN
	}
	return ""
}
