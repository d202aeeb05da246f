package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every pillar-csi resource; it is also the
// CSI driver name.
const GroupName = "pillar-csi.io"

var (
	// GroupVersion is the group and version of the types in this package.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&PillarAgent{}, &PillarAgentList{},
		&PillarStore{}, &PillarStoreList{},
		&PillarProtocol{}, &PillarProtocolList{},
		&PillarStorageClass{}, &PillarStorageClassList{},
		&PillarVolumeState{}, &PillarVolumeStateList{},
		&PillarSnapshotState{}, &PillarSnapshotStateList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
