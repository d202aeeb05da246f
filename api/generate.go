package api

// Generated code: deep-copy functions and CRD manifests from the markers in
// v1alpha1, Go code from the agent's .proto files. `make generate` runs these
// with the pinned tools of bin/ first on PATH.

//go:generate controller-gen object paths=./v1alpha1/...
//go:generate controller-gen crd paths=./v1alpha1/... output:crd:artifacts:config=config/crd
//go:generate buf generate
