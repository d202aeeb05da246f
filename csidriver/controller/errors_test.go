package controller

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

func TestAgentError(t *testing.T) {
	fenced := agentv1.NewFencingError(&agentv1.FencingRejection{Reason: agentv1.FencingRejection_REASON_STALE_GENERATION, VolumeId: "v",
		Presented: &agentv1.FencingToken{LifecycleUid: "u1", PublicationGeneration: 3}, Mark: &agentv1.FencingToken{LifecycleUid: "u1", PublicationGeneration: 5}}, "stale")
	for _, c := range []struct {
		in   error
		code codes.Code
		says string
	}{
		{fenced, codes.FailedPrecondition, "refused by the agent's fencing (REASON_STALE_GENERATION)"},
		{status.Error(codes.FailedPrecondition, "pool tank does not exist"), codes.FailedPrecondition, "pool tank does not exist"},
		{status.Error(codes.Unavailable, "connection refused"), codes.Unavailable, "connection refused"},
		{status.Error(codes.DeadlineExceeded, "slow"), codes.DeadlineExceeded, "slow"},
		{status.Error(codes.ResourceExhausted, "no space"), codes.ResourceExhausted, "no space"},
		{status.Error(codes.Aborted, "busy"), codes.Aborted, "busy"},
		{status.Error(codes.AlreadyExists, "other size"), codes.AlreadyExists, "other size"},
		{status.Error(codes.Unimplemented, "zfs: not found"), codes.FailedPrecondition, "zfs: not found"},
		{status.Error(codes.Internal, "boom"), codes.Internal, "boom"},
		{status.Error(codes.Unknown, "?"), codes.Internal, "?"},
		{errors.New("not a status"), codes.Internal, "not a status"},
	} {
		err := mapAgentError("v", "CreateVolume", c.in)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "volume v: CreateVolume") && c.in != fenced {
			t.Errorf("mapAgentError(%v) = %v, want %s mentioning %q", c.in, err, c.code, c.says)
		}
		// What the claim's events show names no token: not the mark an
		// older agent still sent, not the controller's own.
		if c.in == fenced && (strings.Contains(err.Error(), "u1") || strings.ContainsAny(err.Error(), "35")) {
			t.Errorf("mapAgentError(%v) = %v: it names a token", c.in, err)
		}
	}
}

// An agent's refusal that quotes a host NQN reaches the pod's events
// through ControllerPublishVolume: withoutHost puts the node in its place
// and keeps the code and the details.
func TestWithoutHost(t *testing.T) {
	const nqn = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001"
	fenced := agentv1.NewFencingError(&agentv1.FencingRejection{Reason: agentv1.FencingRejection_REASON_STALE_GENERATION, VolumeId: "v"}, "stale for "+nqn)
	for _, in := range []error{
		status.Error(codes.Internal, "mkdir /sys/kernel/config/nvmet/hosts/"+nqn+": invalid argument"),
		fenced,
	} {
		out := withoutHost(in, nqn, "the host NQN of node worker-a")
		if strings.Contains(out.Error(), nqn) || !strings.Contains(out.Error(), "the host NQN of node worker-a") {
			t.Errorf("withoutHost(%v) = %v", in, out)
		}
		if status.Code(out) != status.Code(in) {
			t.Errorf("withoutHost(%v): code %s, want %s", in, status.Code(out), status.Code(in))
		}
		if _, ok := agentv1.FencingRejectionOf(in); ok {
			if _, ok := agentv1.FencingRejectionOf(out); !ok {
				t.Errorf("withoutHost(%v) lost the fencing details", in)
			}
		}
	}
	plain := errors.New("not a status " + nqn)
	if got := withoutHost(plain, nqn, "x"); got != plain {
		t.Errorf("withoutHost of a non-status error = %v, want it unchanged", got)
	}
}
