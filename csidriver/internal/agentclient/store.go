package agentclient

import (
	"maps"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// StoreFor is the agent API's description of a PillarStore: the whole
// configuration travels with every call, because the agent keeps none.
// It returns nil when the backend's section is missing.
func StoreFor(s *v1alpha1.PillarStore) *agentv1.Store {
	switch {
	case s.Spec.Type == v1alpha1.BackendZFS && s.Spec.ZFS != nil:
		z := s.Spec.ZFS
		return &agentv1.Store{Name: s.Name, Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{
			Pool: z.Pool, ParentDataset: z.ParentDataset, Sparse: z.Sparse, Properties: maps.Clone(z.Properties),
		}}}
	case s.Spec.Type == v1alpha1.BackendLVM && s.Spec.LVM != nil:
		return &agentv1.Store{Name: s.Name, Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{
			VolumeGroup: s.Spec.LVM.VolumeGroup, ThinPool: s.Spec.LVM.ThinPool,
			AllowUnzeroedThinPool: s.Spec.LVM.AllowUnzeroedThinPool,
		}}}
	}
	return nil
}
