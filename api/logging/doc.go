// Package logging gives pillar-controller, pillar-node and pillar-agent
// one log record shape: the same -log-level and -log-format flags with the
// same meaning, a slog logger built from them, and the one gRPC
// interceptor that logs every unary call.
//
// Each call is one record with the message "rpc" and the attributes
// method, code, duration_seconds, peer (when the transport names the
// caller; a unix socket's client has no name),
// volume_id (when the request names one) and, on failure, error (the
// status message). Requests are never logged whole: CSI requests carry
// secrets, and a field added to the agent API later might too.
//
// Levels follow who is at fault. A failure the server caused (INTERNAL,
// UNKNOWN, DATA_LOSS) is an error; any other failure is info, because
// refusals such as ABORTED for a busy volume or fencing's
// FAILED_PRECONDITION are the services working as designed and an
// operator grepping for errors must not drown in them; a success is info,
// except for the methods a server names as quiet (reads polled on a
// timer, health probes), which are debug.
//
// It lives in the api module, the one module every binary's module
// requires, and needs only the standard library and google.golang.org/grpc.
package logging
