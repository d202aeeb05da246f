package csidriver

// Generated files: the RBAC rules pillar-controller needs, from the
// +kubebuilder:rbac markers next to the code that uses each permission,
// and the reference of its metrics from the collectors it registers.
// `make generate` runs these with the pinned controller-gen of bin/.

//go:generate controller-gen rbac:roleName=pillar-controller paths=./... output:rbac:artifacts:config=config/rbac
//go:generate go run ./controllerapp/refgen -o ../docs/reference/pillar-controller-metrics.md
