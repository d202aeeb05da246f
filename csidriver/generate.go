package csidriver

// Generated files: the RBAC rules pillar-controller needs, from the
// +kubebuilder:rbac markers next to the code that uses each permission.
// `make generate` runs this with the pinned controller-gen of bin/.

//go:generate controller-gen rbac:roleName=pillar-controller paths=./... output:rbac:artifacts:config=config/rbac
