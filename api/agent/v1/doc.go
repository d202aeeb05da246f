// Package agentv1 is the gRPC API between pillar-controller (the client) and
// pillar-agent (the server on each storage node), generated from
// agent.proto (proto package pillar.agent.v1) by buf with protoc-gen-go and
// protoc-gen-go-grpc.
//
// Every request that changes a volume carries a FencingToken: the UID of the
// volume's PillarVolumeState (its lifecycle) and that object's
// publicationGeneration. The agent refuses stale, unfenced or out-of-lifecycle
// requests with codes.FailedPrecondition and a FencingRejection detail;
// NewFencingError builds such an error on the agent's side and
// FencingRejectionOf recognises it on the controller's. Each RPC's comment in
// agent.proto (repeated on the generated AgentServiceClient methods) states
// its idempotency and its error codes.
//
// The identifiers of an export (subsystem NQN, namespace UUID and NGUID) are
// not chosen by the agent: both it and the node derive them from the volume
// ID with the github.com/pillar-csi/pillar-csi/api/export package.
//
// Changes to this API follow COMPATIBILITY.md: within pillar.agent.v1 only
// additions, checked by `buf breaking` against the last released api tag.
package agentv1
