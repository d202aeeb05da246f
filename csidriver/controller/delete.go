package controller

import (
	"context"
	"net"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
)

// deleteVolume removes the export, then has the agent delete the backend
// volume, which ends the volume's lifecycle in the agent's fencing mark;
// only after the agent accepted that is the record let go. An unknown
// volume is success.
func (s *Service) deleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
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
		if v.DeletionTimestamp.IsZero() {
			if err := s.noOtherPV(ctx, id); err != nil {
				return err
			}
		}
		if len(v.Spec.Publications) > 0 {
			return errorf(codes.FailedPrecondition, id, "the volume is still published to %s: unpublish it first", nodeNames(v.Spec.Publications))
		}
		if v.DeletionTimestamp.IsZero() {
			// Mark the record deleted first: a concurrent CreateVolume
			// of the same name then waits instead of reusing it.
			if err := s.cfg.Client.Delete(ctx, v); client404(err) != nil {
				return errorf(codes.Unavailable, id, "deleting the PillarVolumeState: %v", err)
			}
			return errLostRace // read it again, with its deletion timestamp
		}
		return s.teardown(ctx, v)
	})
	if err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// teardown undoes what the record shows done, then drops the finalizer.
func (s *Service) teardown(ctx context.Context, v *v1alpha1.PillarVolumeState) error {
	_, store, conn, err := s.storeOf(ctx, v)
	if err != nil {
		return err
	}
	// One agent call: the agent's DeleteVolume removes the export (the
	// subsystem of the volume's ID, the one the record names) before the
	// volume, since nvmet holds the device open. No status write is
	// needed between them: nothing re-exports a record that is being
	// deleted (recover.go, decisions.go), and the agent refuses any call
	// of an older token once the End was admitted.
	tok, err := s.issue(ctx, v)
	if err != nil {
		return err
	}
	if _, err := conn.Agent.DeleteVolume(ctx, &agentv1.DeleteVolumeRequest{FencingToken: tok, VolumeId: v.Name, Store: store}); err != nil {
		return s.agentError(v, "DeleteVolume", err)
	}
	v.Status.BackendCreated = false
	s.storeChanged(v.Spec.StoreName)
	v.Finalizers = slices.DeleteFunc(v.Finalizers, func(f string) bool { return f == Finalizer })
	if err := client404(s.cfg.Client.Update(ctx, v)); err != nil {
		if apierrors.IsConflict(err) {
			return errLostRace
		}
		return errorf(codes.Unavailable, v.Name, "releasing the PillarVolumeState: %v", err)
	}
	s.log.Info("volume deleted", "volume_id", v.Name, "store", v.Spec.StoreName)
	return nil
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// nodesOf are the node IDs of the volume's publications, as CSI reports
// them (PublishedNodeIds).
func nodesOf(v *v1alpha1.PillarVolumeState) []string {
	var out []string
	for _, p := range v.Spec.Publications {
		out = append(out, p.NodeID)
	}
	return out
}

// nodeNames are the names of the nodes of pubs, for messages (nodeName).
func nodeNames(pubs []v1alpha1.Publication) []string {
	var out []string
	for _, p := range pubs {
		out = append(out, nodeName(p.NodeID))
	}
	return out
}

func cutPort(endpoint string) (host, port string, err error) {
	return net.SplitHostPort(endpoint)
}

// IndexVolumeHandle indexes PersistentVolumes of this driver by
// spec.csi.volumeHandle (see VolumeHandles).
const IndexVolumeHandle = "spec.csi.volumeHandle"

// VolumeHandles is the index function of IndexVolumeHandle.
func VolumeHandles(o client.Object) []string {
	pv, ok := o.(*corev1.PersistentVolume)
	if !ok || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driver.Name {
		return nil
	}
	return []string{pv.Spec.CSI.VolumeHandle}
}

// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch

// noOtherPV refuses to delete volume id while a PersistentVolume other
// than its own (the one whose name the ID was made from) still names
// it as its volumeHandle: a read-only PersistentVolume made by hand for
// the volume (docs/install.md, "Sharing a volume read-only") would serve
// readers whose data is gone. FAILED_PRECONDITION: the provisioner retries
// until that PersistentVolume is deleted.
func (s *Service) noOtherPV(ctx context.Context, id string) error {
	var pvs corev1.PersistentVolumeList
	var err error
	if s.cfg.PersistentVolumes != nil {
		err = s.cfg.PersistentVolumes.List(ctx, &pvs, client.MatchingFields{IndexVolumeHandle: id})
	} else {
		err = s.cfg.Reader.List(ctx, &pvs)
	}
	if err != nil {
		return errorf(codes.Unavailable, id, "listing the PersistentVolumes that name the volume: %v", err)
	}
	var others []string
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		// The volume's own PV is the one whose name gave the volume its
		// ID (volumeIDFor: the name itself when it is a valid ID).
		if volumeIDFor(pv.Name) != id && slices.Contains(VolumeHandles(pv), id) {
			others = append(others, pv.Name)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		return errorf(codes.FailedPrecondition, id, "PersistentVolume %s still names this volume (spec.csi.volumeHandle): deleting it would destroy the data it serves; delete that PersistentVolume first",
			strings.Join(others, ", "))
	}
	return nil
}
