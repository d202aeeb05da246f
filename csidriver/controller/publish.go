package controller

import (
	"context"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
)

// ControllerPublishVolume grants a node access: the publication is recorded
// on the PillarVolumeState first (where it enforces the access mode's
// exclusivity), then the node's host NQN is allowed on the subsystem.
func (s *Service) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id := req.GetVolumeId()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node ID is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", id, err)
	}
	mode, _ := accessModeOf(req.GetVolumeCapability())
	node, err := export.ParseNodeID(req.GetNodeId())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "node %q: %v", req.GetNodeId(), err)
	}
	if err := s.ownHostNQN(ctx, id, node); err != nil {
		return nil, err
	}
	want := v1alpha1.Publication{NodeID: req.GetNodeId(), HostNQN: v1alpha1.NQN(node.HostNQN), AccessMode: mode, ReadOnly: req.GetReadonly()}
	unlock, err := s.lock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	err = s.retrying(ctx, id, func(v *v1alpha1.PillarVolumeState) error {
		if v == nil || !v.DeletionTimestamp.IsZero() {
			return errorf(codes.NotFound, id, "no such volume")
		}
		if v.Spec.Export == nil {
			return errorf(codes.FailedPrecondition, id, "the PillarVolumeState has no export spec (ExportSpecMissing): state bindAddress, port and aclEnabled as %s", recoveryDoc)
		}
		if !v.Status.BackendCreated {
			return errorf(codes.FailedPrecondition, id, "the volume is not provisioned yet")
		}
		if !v.Status.Exported {
			// A legacy volume whose export spec the operator just stated,
			// or an export interrupted: finish it first.
			var err error
			if v, err = s.provision(ctx, v, nil, false); err != nil {
				return err
			}
		}
		i := slices.IndexFunc(v.Spec.Publications, func(p v1alpha1.Publication) bool { return p.NodeID == want.NodeID })
		if i >= 0 && v.Spec.Publications[i] != want {
			return status.Errorf(codes.AlreadyExists, "volume %s is published to %s with %s (read-only %v), not %s (read-only %v)",
				id, want.NodeID, v.Spec.Publications[i].AccessMode, v.Spec.Publications[i].ReadOnly, want.AccessMode, want.ReadOnly)
		}
		if i < 0 {
			if err := exclusive(v, want); err != nil {
				return err
			}
			v.Spec.Publications = append(v.Spec.Publications, want)
		}
		// The publication and the token's generation in one
		// compare-and-swap: a second publication racing this one loses it.
		tok, err := s.issue(ctx, v)
		if err != nil {
			return err
		}
		if i < 0 {
			s.event(v, corev1.EventTypeNormal, "Published", "published to node %s (%s, read-only %v)", want.NodeID, want.AccessMode, want.ReadOnly)
		}
		if !*v.Spec.Export.ACLEnabled {
			return nil
		}
		_, _, conn, err := s.storeOf(ctx, v.Spec.StoreName)
		if err != nil {
			return err
		}
		if _, err := conn.Agent.AllowHost(ctx, &agentv1.AllowHostRequest{FencingToken: tok, VolumeId: id,
			SubsystemNqn: subsystemNQN(v), HostNqn: node.HostNQN}); err != nil {
			return s.agentError(v, "AllowHost", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerPublishVolumeResponse{}, nil
}

// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch

// ownHostNQN refuses a publication to a node whose host NQN another node
// presents too (cloned machine images carry /etc/nvme/hostnqn along): the
// storage node knows hosts only by NQN, so its access list could not keep
// a volume published to one of them from the others, and revoking one
// would not fence it. The other nodes' NQNs are read from their CSINodes,
// where pillar-node registered its node ID.
func (s *Service) ownHostNQN(ctx context.Context, id string, node export.NodeID) error {
	var nodes storagev1.CSINodeList
	if err := s.cfg.Client.List(ctx, &nodes); err != nil {
		return status.Errorf(codes.Unavailable, "volume %s: listing CSINodes to check that node %s's host NQN is its own: %v", id, node.NodeName, err)
	}
	var others []string
	for _, n := range nodes.Items {
		if n.Name == node.NodeName {
			continue
		}
		for _, d := range n.Spec.Drivers {
			if d.Name != driver.Name {
				continue
			}
			if other, err := export.ParseNodeID(d.NodeID); err == nil && other.HostNQN == node.HostNQN {
				others = append(others, n.Name)
			}
		}
	}
	if len(others) == 0 {
		return nil
	}
	slices.Sort(others)
	return errorf(codes.FailedPrecondition, id, "node %s presents NVMe host NQN %s, and so does node %s: the storage node cannot tell them apart, so a volume published to one would be open to the other; give each node its own /etc/nvme/hostnqn and /etc/nvme/hostid (docs/troubleshooting.md, \"Nodes sharing a host NQN\")",
		node.NodeName, node.HostNQN, strings.Join(others, ", "))
}

// exclusive applies the access modes: a read-write publication excludes
// every other publication.
func exclusive(v *v1alpha1.PillarVolumeState, want v1alpha1.Publication) error {
	for _, p := range v.Spec.Publications {
		if p.AccessMode != v1alpha1.AccessReadOnlyMany || want.AccessMode != v1alpha1.AccessReadOnlyMany {
			return errorf(codes.FailedPrecondition, v.Name, "already published to node %s with %s; a %s volume is published to one node at a time: unpublish it there first",
				p.NodeID, p.AccessMode, modeOf(p, want))
		}
	}
	return nil
}

func modeOf(p, want v1alpha1.Publication) v1alpha1.AccessMode {
	if p.AccessMode != v1alpha1.AccessReadOnlyMany {
		return p.AccessMode
	}
	return want.AccessMode
}

// ControllerUnpublishVolume revokes a node's access: its host NQN is denied
// first, then the publication is removed from the record. A volume or
// publication that does not exist is success.
func (s *Service) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
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
		var gone []v1alpha1.Publication
		keep := v.Spec.Publications[:0:0]
		for _, p := range v.Spec.Publications {
			if req.GetNodeId() == "" || p.NodeID == req.GetNodeId() {
				gone = append(gone, p)
			} else {
				keep = append(keep, p)
			}
		}
		if len(gone) == 0 {
			return nil
		}
		tok, err := s.issue(ctx, v)
		if err != nil {
			return err
		}
		if v.Spec.Export != nil && *v.Spec.Export.ACLEnabled {
			_, _, conn, err := s.storeOf(ctx, v.Spec.StoreName)
			if err != nil {
				return err
			}
			for _, p := range gone {
				if shared(keep, p.HostNQN) {
					continue
				}
				if _, err := conn.Agent.DenyHost(ctx, &agentv1.DenyHostRequest{FencingToken: tok, VolumeId: id,
					SubsystemNqn: subsystemNQN(v), HostNqn: string(p.HostNQN)}); err != nil {
					return s.agentError(v, "DenyHost", err)
				}
			}
		}
		v.Spec.Publications = keep
		if err := s.cfg.Client.Update(ctx, v); err != nil {
			return lostOr(err, id, "removing the publication")
		}
		s.event(v, corev1.EventTypeNormal, "Unpublished", "unpublished from %s", nodesOfPubs(gone))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// shared reports whether another publication uses the same host NQN.
func shared(pubs []v1alpha1.Publication, nqn v1alpha1.NQN) bool {
	return slices.ContainsFunc(pubs, func(p v1alpha1.Publication) bool { return p.HostNQN == nqn })
}
