package api

// Generated code: deep-copy functions and CRD manifests from the markers in
// v1alpha1, the references of the CRDs' fields and of the condition and
// event reasons (docs/reference), Go code from the agent's .proto files.
// `make generate` runs these with the pinned tools of bin/ first on PATH.

//go:generate controller-gen object paths=./v1alpha1/...
//go:generate controller-gen crd paths=./v1alpha1/... output:crd:artifacts:config=config/crd
//go:generate go run ./internal/refgen -reasons ../docs/reference/reasons.md -crds ../docs/reference/crds.md
//go:generate buf generate
