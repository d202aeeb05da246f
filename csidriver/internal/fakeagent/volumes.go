package fakeagent

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/fencing"
)

// Volume is a backend volume of the model.
type Volume struct {
	Store string // pool or volume group
	Size  int64
	// Origin is what the volume was made from: "snapshot ID" or
	// "volume ID"; empty for an empty volume.
	Origin string
}

// Export is an export of the model.
type Export struct {
	NQN   string
	ACL   bool
	Hosts []string
}

// The volume calls are checked against real, durable fencing marks (the
// fencing module's Store in a directory of the agent), so a controller
// test sees exactly the refusals pillar-agent gives.

// EnableVolumes gives the agent a fencing store in dir and an empty model
// of volumes and exports. RoundTo rounds sizes up like a backend
// (0: no rounding).
func (a *Agent) EnableVolumes(dir string, roundTo int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	st, err := fencing.Open(context.Background(), dir, fencing.Options{})
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.marks, a.round = st, roundTo
	a.volumes, a.exports, a.fail, a.after = map[string]Volume{}, map[string]Export{}, map[string]error{}, map[string]func(){}
	a.snapshots = map[string]Snapshot{}
	return nil
}

// CloseVolumes closes the fencing store.
func (a *Agent) CloseVolumes() {
	a.mu.Lock()
	st := a.marks
	a.mu.Unlock()
	if st != nil {
		_ = st.Close()
	}
}

// FailNext makes the next call of method fail with err after the fencing
// check admitted it (as an agent whose backend failed would).
func (a *Agent) FailNext(method string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail[method] = err
}

// Hooks connect the fake agent to a fake data path: Exported is called
// (under the agent's lock: do not call back into the agent) when a
// volume's export is made, Grown when its size changes.
type Hooks struct {
	Exported func(volumeID, bindAddress string, port uint16, size int64)
	Grown    func(volumeID string, size int64)
}

// SetHooks installs h.
func (a *Agent) SetHooks(h Hooks) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hooks = h
}

// AfterNext runs f once the next call of method has succeeded, before
// its answer is sent: a test cancels the caller there, as a controller
// that crashed between the agent's work and recording it.
func (a *Agent) AfterNext(method string, f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.after[method] = f
}

// Volumes and Exports return copies of the model.
func (a *Agent) Volumes() map[string]Volume {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]Volume{}
	for k, v := range a.volumes {
		out[k] = v
	}
	return out
}

func (a *Agent) Exports() map[string]Export {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]Export{}
	for k, v := range a.exports {
		v.Hosts = slices.Clone(v.Hosts)
		out[k] = v
	}
	return out
}

// fenced runs act under the volume's fencing mark.
func (a *Agent) fenced(ctx context.Context, method, id string, kind fencing.Kind, pt *agentv1.FencingToken, act func() error) error {
	return a.fencedAll(ctx, method, []fence{{id, kind, pt}}, act)
}

// fence is one lifecycle a call is fenced by: a volume, or a snapshot
// ("snapshot/" and its ID), as pillar-agent keys them.
type fence struct {
	key   string
	kind  fencing.Kind
	token *agentv1.FencingToken
}

// fencedAll runs act when every fence's token is admitted, checked in key
// order, as pillar-agent does for a call that changes two lifecycles.
func (a *Agent) fencedAll(ctx context.Context, method string, fs []fence, act func() error) error {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(x, y fence) int { return strings.Compare(x.key, y.key) })
	a.mu.Lock()
	a.calls[method]++
	for _, f := range fs {
		a.presented[[2]string{method, f.key}] = append(a.presented[[2]string{method, f.key}], f.token.GetPublicationGeneration())
	}
	st := a.marks
	a.mu.Unlock()
	if st == nil {
		return status.Error(codes.Unimplemented, "fake agent: volumes not enabled")
	}
	entered := make([]bool, len(fs)+1)
	var run func(i int) error
	run = func(i int) error {
		entered[i] = true
		if i == len(fs) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if err, ok := a.fail[method]; ok {
				delete(a.fail, method)
				return err
			}
			return act()
		}
		f := fs[i]
		tok := fencing.Token{UID: f.token.GetLifecycleUid(), Generation: f.token.GetPublicationGeneration()}
		err := st.Do(ctx, f.key, f.kind, tok, func(context.Context) error { return run(i + 1) })
		if err != nil && !entered[i+1] && fencing.IsRejected(err) {
			r := fencing.RejectionReason(err)
			rej := &agentv1.FencingRejection{VolumeId: f.key, Presented: f.token,
				Reason: agentv1.FencingRejection_Reason(agentv1.FencingRejection_Reason_value["REASON_"+r.String()])}
			if r.String() == "MALFORMED" {
				rej.Reason = agentv1.FencingRejection_REASON_MALFORMED_TOKEN
			}
			return agentv1.NewFencingError(rej, fmt.Sprintf("%s %s: %v", method, f.key, err))
		}
		return err
	}
	err := run(0)
	a.mu.Lock()
	after := a.after[method]
	delete(a.after, method)
	a.mu.Unlock()
	if after != nil && err == nil {
		after()
	}
	return err
}

func poolOf(st *agentv1.Store) string {
	if p := st.GetZfs().GetPool(); p != "" {
		return p
	}
	return st.GetLvm().GetVolumeGroup()
}

func (s *service) CreateVolume(ctx context.Context, req *agentv1.CreateVolumeRequest) (*agentv1.CreateVolumeResponse, error) {
	a := s.a
	var out int64
	fs := []fence{{req.GetVolumeId(), fencing.KindMutate, req.GetFencingToken()}}
	origin, sourceFence := contentSource(req.GetContentSource())
	if origin != "" {
		fs = append(fs, sourceFence)
	}
	err := a.fencedAll(ctx, "CreateVolume", fs, func() error {
		size := req.GetCapacityBytes()
		if a.round > 0 {
			size = (size + a.round - 1) / a.round * a.round
		}
		if origin != "" {
			return a.createFrom(req.GetVolumeId(), poolOf(req.GetStore()), origin, size, &out)
		}
		if v, ok := a.volumes[req.GetVolumeId()]; ok {
			if v.Size < req.GetCapacityBytes() {
				return status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes", req.GetVolumeId(), v.Size)
			}
			out = v.Size
			return nil
		}
		a.volumes[req.GetVolumeId()] = Volume{Store: poolOf(req.GetStore()), Size: size}
		out = size
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.CreateVolumeResponse{Volume: &agentv1.Volume{VolumeId: req.GetVolumeId(), CapacityBytes: out}}, nil
}

func (s *service) DeleteVolume(ctx context.Context, req *agentv1.DeleteVolumeRequest) (*agentv1.DeleteVolumeResponse, error) {
	a := s.a
	err := a.fenced(ctx, "DeleteVolume", req.GetVolumeId(), fencing.KindEnd, req.GetFencingToken(), func() error {
		// As pillar-agent: the export goes first, then the volume.
		delete(a.exports, req.GetVolumeId())
		delete(a.volumes, req.GetVolumeId())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.DeleteVolumeResponse{}, nil
}

func (s *service) ExpandVolume(ctx context.Context, req *agentv1.ExpandVolumeRequest) (*agentv1.ExpandVolumeResponse, error) {
	a := s.a
	var out int64
	err := a.fenced(ctx, "ExpandVolume", req.GetVolumeId(), fencing.KindMutate, req.GetFencingToken(), func() error {
		v, ok := a.volumes[req.GetVolumeId()]
		if !ok {
			return status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
		}
		if req.GetCapacityBytes() < v.Size {
			return status.Errorf(codes.FailedPrecondition, "volume %s cannot shrink", req.GetVolumeId())
		}
		v.Size = req.GetCapacityBytes()
		a.volumes[req.GetVolumeId()] = v
		out = v.Size
		if a.hooks.Grown != nil {
			a.hooks.Grown(req.GetVolumeId(), v.Size)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.ExpandVolumeResponse{Volume: &agentv1.Volume{VolumeId: req.GetVolumeId(), CapacityBytes: out}}, nil
}

func (s *service) ExportVolume(ctx context.Context, req *agentv1.ExportVolumeRequest) (*agentv1.ExportVolumeResponse, error) {
	a := s.a
	err := a.fenced(ctx, "ExportVolume", req.GetVolumeId(), fencing.KindMutate, req.GetFencingToken(), func() error {
		if _, ok := a.volumes[req.GetVolumeId()]; !ok {
			return status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
		}
		id, err := export.For(req.GetVolumeId())
		if err != nil || req.GetSubsystemNqn() != id.SubsystemNQN {
			return status.Errorf(codes.InvalidArgument, "subsystem NQN %q is not the volume's", req.GetSubsystemNqn())
		}
		e := a.exports[req.GetVolumeId()]
		e.NQN, e.ACL = req.GetSubsystemNqn(), req.GetNvmeofTcp().GetAclEnabled()
		a.exports[req.GetVolumeId()] = e
		if a.hooks.Exported != nil {
			a.hooks.Exported(req.GetVolumeId(), req.GetNvmeofTcp().GetBindAddress(), uint16(req.GetNvmeofTcp().GetPort()), a.volumes[req.GetVolumeId()].Size)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.ExportVolumeResponse{Export: &agentv1.Export{VolumeId: req.GetVolumeId(), SubsystemNqn: req.GetSubsystemNqn()}}, nil
}

func (s *service) UnexportVolume(ctx context.Context, req *agentv1.UnexportVolumeRequest) (*agentv1.UnexportVolumeResponse, error) {
	a := s.a
	err := a.fenced(ctx, "UnexportVolume", req.GetVolumeId(), fencing.KindMutate, req.GetFencingToken(), func() error {
		delete(a.exports, req.GetVolumeId())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.UnexportVolumeResponse{}, nil
}

func (s *service) AllowHost(ctx context.Context, req *agentv1.AllowHostRequest) (*agentv1.AllowHostResponse, error) {
	a := s.a
	err := a.fenced(ctx, "AllowHost", req.GetVolumeId(), fencing.KindMutate, req.GetFencingToken(), func() error {
		e, ok := a.exports[req.GetVolumeId()]
		if !ok {
			return status.Errorf(codes.NotFound, "volume %s is not exported", req.GetVolumeId())
		}
		if !slices.Contains(e.Hosts, req.GetHostNqn()) {
			e.Hosts = append(e.Hosts, req.GetHostNqn())
		}
		a.exports[req.GetVolumeId()] = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.AllowHostResponse{}, nil
}

func (s *service) DenyHost(ctx context.Context, req *agentv1.DenyHostRequest) (*agentv1.DenyHostResponse, error) {
	a := s.a
	err := a.fenced(ctx, "DenyHost", req.GetVolumeId(), fencing.KindMutate, req.GetFencingToken(), func() error {
		if e, ok := a.exports[req.GetVolumeId()]; ok {
			e.Hosts = slices.DeleteFunc(e.Hosts, func(h string) bool { return h == req.GetHostNqn() })
			a.exports[req.GetVolumeId()] = e
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.DenyHostResponse{}, nil
}

// WipeExports removes every export, as a storage-node reboot empties
// configfs; volumes and fencing marks stay (they are on disk).
func (a *Agent) WipeExports() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.exports = map[string]Export{}
}

func (s *service) Reconcile(ctx context.Context, req *agentv1.ReconcileRequest) (*agentv1.ReconcileResponse, error) {
	a := s.a
	resp := &agentv1.ReconcileResponse{}
	named := map[string]bool{}
	for _, d := range req.GetExports() {
		named[d.GetVolumeId()] = true
		err := a.fenced(ctx, "Reconcile", d.GetVolumeId(), fencing.KindMutate, d.GetFencingToken(), func() error {
			if _, ok := a.volumes[d.GetVolumeId()]; !ok {
				return status.Errorf(codes.NotFound, "volume %s does not exist", d.GetVolumeId())
			}
			hosts := slices.Clone(d.GetAllowedHostNqns())
			slices.Sort(hosts)
			a.exports[d.GetVolumeId()] = Export{NQN: d.GetSubsystemNqn(), ACL: d.GetNvmeofTcp().GetAclEnabled(), Hosts: hosts}
			return nil
		})
		r := &agentv1.ReconcileResult{VolumeId: d.GetVolumeId(), Code: int32(status.Code(err)), Message: status.Convert(err).Message()}
		if rej, ok := agentv1.FencingRejectionOf(err); ok {
			r.FencingRejection = rej
		}
		resp.Results = append(resp.Results, r)
	}
	if req.GetPartial() {
		return resp, nil // the last batch sweeps
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, e := range a.exports {
		if !named[id] {
			resp.RetainedSubsystemNqns = append(resp.RetainedSubsystemNqns, e.NQN)
		}
	}
	slices.Sort(resp.RetainedSubsystemNqns)
	return resp, nil
}

// SeedVolume puts a backend volume in the model, as one made by an earlier
// release would be.
func (a *Agent) SeedVolume(id, store string, size int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.volumes[id] = Volume{Store: store, Size: size}
}
