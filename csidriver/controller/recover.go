package controller

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// Pushed is what PushExports did on one agent.
type Pushed struct {
	// Restored are the volumes whose export the agent converged.
	Restored []string
	// Failed maps a volume to why its entry failed (the agent's message or
	// a fencing refusal); Busy volumes had an operation in flight and are
	// left to it and to the next push.
	Failed map[string]string
	Busy   []string
	// Retained are pillar-owned subsystems the agent has that no pushed
	// entry named and that it kept, because it cannot tell their volume is
	// gone.
	Retained []string
}

// Done reports whether every volume was restored.
func (p Pushed) Done() bool { return len(p.Failed) == 0 && len(p.Busy) == 0 }

// PushExports pushes the desired export of every exported volume on the
// agent's stores with the agent's Reconcile RPC: after an agent restart or
// a storage-node reboot (which empties configfs) the exports come back,
// with exactly the allowed hosts of the volume's publications, under a
// fresh fencing token each, so nothing this controller no longer owns is
// touched.
func (s *Service) PushExports(ctx context.Context, agentName string) (Pushed, error) {
	out := Pushed{Failed: map[string]string{}}
	var stores v1alpha1.PillarStoreList
	if err := s.cfg.Client.List(ctx, &stores); err != nil {
		return out, status.Errorf(codes.Unavailable, "listing PillarStores: %v", err)
	}
	byName := storesOn(stores.Items, agentName)
	if len(byName) == 0 {
		return out, nil
	}
	var vols v1alpha1.PillarVolumeStateList
	if err := s.cfg.Reader.List(ctx, &vols); err != nil {
		return out, status.Errorf(codes.Unavailable, "listing PillarVolumeStates: %v", err)
	}
	var a v1alpha1.PillarAgent
	if err := s.cfg.Client.Get(ctx, client.ObjectKey{Name: agentName}, &a); err != nil {
		return out, status.Errorf(codes.Unavailable, "reading PillarAgent %q: %v", agentName, err)
	}
	conn, err := s.cfg.Connector.Connect(ctx, &a)
	if err != nil {
		return out, status.Errorf(codes.Unavailable, "agent %q: %v", agentName, err)
	}

	var desired []*agentv1.DesiredExport
	var unlocks []func()
	defer func() {
		for _, u := range unlocks {
			u()
		}
	}()
	for i := range vols.Items {
		v := &vols.Items[i]
		store, ok := pushed(v, byName)
		if !ok {
			if ref, on := byName[v.Spec.StoreName]; on && exported(v) && v.DeletionTimestamp.IsZero() {
				if err := sameStore(v, ref.obj); err != nil {
					// Not pushed through a store it was not created in; the
					// event on the agent names it.
					out.Failed[v.Name] = status.Convert(err).Message()
				}
			}
			continue
		}
		unlock, err := s.lock(v.Name)
		if err != nil {
			out.Busy = append(out.Busy, v.Name)
			continue
		}
		unlocks = append(unlocks, unlock)
		var entry *agentv1.DesiredExport
		err = s.retrying(ctx, v.Name, func(v *v1alpha1.PillarVolumeState) error {
			if !exported(v) {
				entry = nil
				return nil
			}
			tok, err := s.issue(ctx, v)
			if err != nil {
				return err
			}
			entry = desiredExport(v, store, tok)
			return nil
		})
		if err != nil {
			out.Failed[v.Name] = err.Error()
			continue
		}
		if entry != nil {
			desired = append(desired, entry)
		}
	}
	pushed := make(map[string]bool, len(desired))
	for _, d := range desired {
		pushed[d.GetVolumeId()] = true
	}
	batches := reconcileBatches(desired, reconcileBatchBytes)
	for _, req := range batches {
		resp, err := conn.Agent.Reconcile(ctx, req)
		if err != nil {
			return out, mapAgentError(agentName, "Reconcile", err)
		}
		tally(&out, resp, pushed)
	}
	s.log.Info("desired exports pushed", "agent", agentName, "batches", len(batches), "restored", len(out.Restored), "failed", len(out.Failed),
		"busy", len(out.Busy), "retained", strings.Join(out.Retained, ","))
	return out, nil
}
