package v1alpha1_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// Valid objects: each rule test breaks one thing in one of these.

func agent(name string) *v1alpha1.PillarAgent {
	return &v1alpha1.PillarAgent{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.PillarAgentSpec{NodeName: "storage-1", Address: "192.0.2.10"},
	}
}

func zfsStore(name string) *v1alpha1.PillarStore {
	return &v1alpha1.PillarStore{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PillarStoreSpec{
			AgentName: "storage-1",
			Type:      v1alpha1.BackendZFS,
			ZFS: &v1alpha1.ZFSStore{
				Pool:          "tank",
				ParentDataset: "pillar/volumes",
				Properties:    map[string]string{"compression": "lz4", "io.pillar-csi:owner": "team-a"},
			},
		},
	}
}

func lvmStore(name string) *v1alpha1.PillarStore {
	return &v1alpha1.PillarStore{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PillarStoreSpec{
			AgentName: "storage-1",
			Type:      v1alpha1.BackendLVM,
			LVM:       &v1alpha1.LVMStore{VolumeGroup: "vg0", ThinPool: "thin0"},
		},
	}
}

func protocol(name string) *v1alpha1.PillarProtocol {
	return &v1alpha1.PillarProtocol{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PillarProtocolSpec{
			Type: v1alpha1.ProtocolNVMeOFTCP,
			NVMeOFTCP: &v1alpha1.NVMeOFTCPProtocol{
				BindAddress: "192.0.2.10",
				Connect:     &v1alpha1.NVMeOFConnectOptions{CtrlLossTimeoutSeconds: ptr.To[int32](600)},
			},
		},
	}
}

func storageClass(name string) *v1alpha1.PillarStorageClass {
	return &v1alpha1.PillarStorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.PillarStorageClassSpec{StoreName: "zfs-tank", ProtocolName: "nvmeof"},
	}
}

const hostA = "nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11"
const hostB = "nqn.2014-08.org.nvmexpress:uuid:0e7e1c53-2d57-4cc4-8b6f-4b1f5f3c2b22"

// volumeState is a provisioned, exported volume published read-write to
// one node. Its name is its volume ID, as the schema requires.
func volumeState(name string) *v1alpha1.PillarVolumeState {
	return &v1alpha1.PillarVolumeState{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PillarVolumeStateSpec{
			VolumeID:      name,
			StoreName:     "zfs-tank",
			ProtocolName:  "nvmeof",
			CapacityBytes: 1 << 30,
			Export: &v1alpha1.ExportSpec{
				BindAddress:  "192.0.2.10",
				Port:         4420,
				ACLEnabled:   ptr.To(true),
				SubsystemNQN: v1alpha1.NQN("nqn.2026-01.io.pillar-csi:volume:" + name),
			},
			Publications: []v1alpha1.Publication{
				{NodeID: "worker-1", HostNQN: hostA, AccessMode: v1alpha1.AccessReadWriteOnce},
			},
			PublicationGeneration: 1,
		},
	}
}

func restoredVolumeState(name string) *v1alpha1.PillarVolumeState {
	v := volumeState(name)
	v.Spec.DataSource = &v1alpha1.VolumeDataSource{SnapshotID: "snapshot-1"}
	return v
}

func snapshotState(name string) *v1alpha1.PillarSnapshotState {
	return &v1alpha1.PillarSnapshotState{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.PillarSnapshotStateSpec{SnapshotID: name, SourceVolumeID: "pvc-1", StoreName: "zfs-tank", StoreUID: "0e7e1c53-2d57-4cc4-8b6f-4b1f5f3c2b22"},
	}
}
