package controller

import (
	"context"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// controllerPublishVolume grants a node access: the publication is recorded
// on the PillarVolumeState first (where it enforces the access mode's
// exclusivity), then the node's host NQN is allowed on the subsystem.
func (s *Service) controllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id := req.GetVolumeId()
	want, node, err := publicationOf(req)
	if err != nil {
		return nil, err
	}
	if err := s.ownHostNQN(ctx, id, node); err != nil {
		return nil, err
	}
	unlock, err := s.lock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	err = s.retryingCached(ctx, id, func(v *v1alpha1.PillarVolumeState) error {
		if err := publishable(id, v); err != nil {
			return err
		}
		if !v.Status.Exported {
			// A legacy volume whose export spec the operator just stated,
			// or an export interrupted: finish it first.
			var err error
			if v, err = s.provision(ctx, v, nil, false); err != nil {
				return err
			}
		}
		add, err := admit(id, v, want)
		if err != nil {
			return err
		}
		if add {
			v.Spec.Publications = append(v.Spec.Publications, want)
		}
		// The publication and the token's generation in one
		// compare-and-swap: a second publication racing this one loses it.
		tok, err := s.issue(ctx, v)
		if err != nil {
			return err
		}
		if add {
			s.event(v, corev1.EventTypeNormal, v1alpha1.ReasonPublished, "published to node %s (%s, read-only %v)%s", nodeName(want.NodeID), want.AccessMode, want.ReadOnly, heldBy(v.Spec.Publications, 2))
		}
		if !*v.Spec.Export.ACLEnabled {
			return nil
		}
		_, _, conn, err := s.storeOf(ctx, v)
		if err != nil {
			return err
		}
		if _, err := conn.Agent.AllowHost(ctx, &agentv1.AllowHostRequest{FencingToken: tok, VolumeId: id,
			SubsystemNqn: subsystemNQN(v), HostNqn: node.HostNQN}); err != nil {
			return withoutHost(s.agentError(v, "AllowHost", err), node.HostNQN, "the host NQN of node "+node.NodeName)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerPublishVolumeResponse{}, nil
}

// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch

// ownHostNQN applies sharedHostNQN to the cluster's CSINodes.
func (s *Service) ownHostNQN(ctx context.Context, id string, node export.NodeID) error {
	var nodes storagev1.CSINodeList
	if err := s.cfg.Client.List(ctx, &nodes); err != nil {
		return status.Errorf(codes.Unavailable, "volume %s: listing CSINodes to check that node %s's host NQN is its own: %v", id, node.NodeName, err)
	}
	return sharedHostNQN(id, node, nodes.Items)
}

// controllerUnpublishVolume revokes a node's access: its host NQN is denied
// first, then the publication is removed from the record. A volume or
// publication that does not exist is success.
func (s *Service) controllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	unlock, err := s.lock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	err = s.retrying(ctx, id, func(v *v1alpha1.PillarVolumeState) error {
		if v == nil {
			return nil
		}
		u := unpublish(v, req.GetNodeId())
		if len(u.gone) == 0 {
			return nil
		}
		tok, err := s.issue(ctx, v)
		if err != nil {
			return err
		}
		if aclEnabled(v) {
			_, _, conn, err := s.storeOf(ctx, v)
			if err != nil {
				return err
			}
			for _, h := range u.deny {
				if _, err := conn.Agent.DenyHost(ctx, &agentv1.DenyHostRequest{FencingToken: tok, VolumeId: id,
					SubsystemNqn: subsystemNQN(v), HostNqn: h}); err != nil {
					return withoutHost(s.agentError(v, "DenyHost", err), h, "the host NQN of a node the volume was published to")
				}
			}
		}
		v.Spec.Publications = u.keep
		if err := s.cfg.Client.Update(ctx, v); err != nil {
			return lostOr(err, id, "removing the publication")
		}
		s.event(v, corev1.EventTypeNormal, v1alpha1.ReasonUnpublished, "unpublished from %s%s", nodeNames(u.gone), heldBy(u.keep, 1))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// heldBy names, for an event, every node a volume is published to, when
// there are at least that many: what a hand-over between two nodes looks
// like in the claim's events (a publication names the others once there
// are two, an unpublication those that remain).
func heldBy(pubs []v1alpha1.Publication, least int) string {
	if len(pubs) < least {
		return ""
	}
	return "; now published to " + strings.Join(nodeNames(pubs), ", ")
}
