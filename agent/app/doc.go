// Package app runs pillar-agent: it parses the command line, serves the
// agent's gRPC service (package server) with optional mutual TLS, the
// standard gRPC health service, Prometheus metrics and structured logs, and
// shuts down gracefully. cmd/pillar-agent is ParseFlags followed by Run.
//
// # Flags
//
//	-listen-address host:port   gRPC address (default ":9420", the PillarAgent default port)
//	-node-name name             Kubernetes node name (default $NODE_NAME; required)
//	-generations-dir dir        durable fencing marks (default /var/lib/pillar-csi/agent/generations)
//	-configfs-root dir          configfs mount point (default /sys/kernel/config)
//	-metrics-address host:port  /metrics, /healthz, /readyz (default ":9421"; empty: off)
//	-log-level level            debug, info, warn or error (default info)
//	-log-format format          json or text (default json)
//	-tls-cert-file file         server certificate (PEM, leaf first)
//	-tls-key-file file          its private key (PEM)
//	-tls-ca-file file           CA bundle client certificates must chain to (PEM)
//	-token-dir dir              every file in it is a token a call may carry (required without mutual TLS)
//	-allow-unauthenticated      plaintext without -token-dir: anyone who reaches the port is obeyed
//	-shutdown-grace-period d    time in-flight calls get after SIGTERM (default 3m0s)
//	-command-timeout d          timeout of each zfs, zpool, lvm command (default 2m)
//	-store-concurrency n        backend changes, and as many look-ups, at once per store; more wait while their caller does (default 4)
//	-readiness-interval d       how often readiness is checked (default 5s)
//	-drift-interval d           how often exports something else removed are put back (default 5s; 0: never)
//	-host-root dir              the host's / mounted in the container: run the host's zfs, zpool, lvm chrooted into it
//	-version                    print the version and exit
//	-lvm-reject regexp          device paths LVM never scans (repeatable; global_filter r|regexp| entries)
//
// Bad values stop the agent at once with an error naming the flag (exit
// status 2); -h lists every flag with its default. "pillar-agent marks
// COMMAND" is the operator's tool for the fencing marks instead (see
// Fencing marks below).
//
// # The host's storage tools
//
// In its container the agent runs the storage node's own zfs, zpool and
// lvm: -host-root names where the host's "/" is mounted (the chart mounts
// it at /host), and every command is looked up in that tree and run
// chrooted into it. The image therefore carries no ZFS or LVM userland: a
// zfs that does not match the host's kernel module, or LVM metadata written
// by two LVM builds with different configurations, cannot happen. Device
// paths (/dev/zdN, /dev/VG/LV) are opened by the agent itself, so its
// container needs the host's /dev.
//
// -lvm-reject keeps LVM away from devices whose contents are the tenants':
// the chart rejects ^/dev/zd (exported zvols) and ^/dev/nvme (volumes
// connected back over NVMe/TCP), so a volume group a tenant made inside a
// volume is never scanned, let alone activated, on the storage node. The
// entries replace the node's own global_filter for the agent's commands;
// a volume group on a local NVMe disk needs a narrower expression.
//
// # Who may call
//
// Every call but the health service's must carry one of the tokens in
// -token-dir as "authorization: Bearer <token>" metadata (package
// agentauth); pillar-controller sends the installation's token from its
// -agent-token-file. A call without one, or with another, is answered
// UNAUTHENTICATED before it reaches the service, and logged at warning
// level with the caller's address (at most once a second, with the number
// left unlogged). The tokens are compared after hashing, in time that does
// not depend on which one matches or how much of a wrong one does. The
// directory is read again every agentauth.ReloadInterval, so a rotated
// Secret takes effect without a restart; a re-read that fails keeps the
// tokens read last and is logged with the next refusal.
//
// A plaintext agent without -token-dir does not start unless
// -allow-unauthenticated says that any client that reaches the port may
// create, export and destroy volumes (a lab on loopback). With mutual TLS
// the client certificate is a credential already, and -token-dir adds the
// token check to it.
//
// # Transport security
//
// gRPC is plaintext unless all three -tls-* files are given; one or two of
// them is an error naming the missing ones. With TLS on, every client must
// present a certificate that chains to the CA file
// (tls.RequireAndVerifyClientCert): a client without one, with one from
// another CA, with an expired one, or speaking plaintext is refused during
// the handshake. With -tls-client-name the certificate must also carry
// that name (its common name or a DNS name): another certificate of the
// same CA (a tenant's, another component's) is refused in the handshake,
// and the refusal logged with the peer's address. TLS 1.2 is the minimum;
// Go clients negotiate TLS 1.3.
//
// Material that cannot work stops the agent at start-up, before the fencing
// store is opened, with an error naming the file: unreadable, not PEM, key
// not matching the certificate, certificate expired, CA file without
// certificates.
//
// Rotation needs no restart (package tlsconfig): before each handshake
// the agent stats the three files and loads them again if they changed.
// Rotations by rename and the kubelet's `..data` symlink swap of a Secret
// volume are both seen. A rotation caught half-written, or one that does not
// load, is logged once at error level and the last good material keeps
// serving; the agent tries again when the files next change. Established
// connections keep the certificate they were set up with.
//
// # Health
//
// The standard grpc.health.v1.Health service reports SERVING for "" and for
// "pillar.agent.v1.AgentService" while the server's Ready returns nil
// (nvmet configfs present, fencing directory writable), NOT_SERVING
// otherwise. Ready is asked before the first connection is accepted and
// then every -readiness-interval. On shutdown both turn NOT_SERVING at once,
// and Watch streams are told.
//
// On the HTTP address, /healthz answers 200 while the process serves
// (liveness) and /readyz answers 200 when ready, else 503 with the reason.
// Point the DaemonSet's probes at these: the kubelet's own gRPC probe
// speaks no TLS, so with mutual TLS on it could not reach the health
// service. The HTTP address carries no secrets and is always plaintext;
// turn it off with an empty -metrics-address or keep the port off the
// network with the node's firewall.
//
// # Metrics
//
// Served at /metrics from the agent's own registry:
//
//	pillar_agent_rpc_duration_seconds{service,method,code}   histogram of unary call latency
//	pillar_agent_rpc_errors_total{service,method,code}       calls that did not end OK
//	pillar_agent_volumes                                     volumes the agent knows of
//	pillar_agent_exports                                     pillar-owned nvmet subsystems
//	pillar_agent_ready                                       1 when ready, else 0
//	pillar_agent_build_info{version,node}                    always 1
//	pillar_agent_tls_certificate_expiry_timestamp_seconds    expiry of the served certificate (TLS only)
//	go_*, process_*                                          Go runtime and process collectors
//
// code is the gRPC code name ("OK", "FailedPrecondition", ...). The volume
// and export gauges are read from the server at scrape time.
//
// # Logs
//
// Structured (slog, JSON by default) on stderr. Each unary call is one
// record "rpc" (api/logging, shared by all three binaries) with method,
// code, duration_seconds, peer and, when the request names one,
// volume_id; failures add the status message. Calls that change
// something and refusals are logged at info, successful reads
// (GetAgentInfo, GetCapacity, List*, health checks) at debug, and INTERNAL,
// UNKNOWN and DATA_LOSS at error.
//
// # Shutdown
//
// On SIGTERM or SIGINT the health service turns NOT_SERVING, new calls are
// refused, calls in flight get -shutdown-grace-period to finish and are cut
// after it, the HTTP server stops, and the server is closed, which waits
// for the backend commands already admitted (they do not follow their
// caller) and releases the fencing store's lock. The exit status is 0. The
// default grace, 3 minutes, covers the longest command (-command-timeout,
// 2 minutes) with room to spare: a command killed half-way can leave a
// volume no retry repairs. The pod's terminationGracePeriodSeconds must
// be longer than the grace; the chart makes it 30 s longer.
//
// # Limits
//
// Messages up to 4 MiB each way (agentv1.MaxMessageSize); 256 calls in
// flight per connection; 16 open connections per address and 256 in all,
// a connection over either closed at once (logged at most every 10 s); a
// new connection must finish its handshake within 10 s; idle connections are pinged every minute and
// dropped after 20 s without an answer; clients may ping at most every
// 10 s (faster pingers get GOAWAY). The HTTP server bounds header reads
// (5 s), requests (10 s) and responses (30 s).
//
// # Fencing marks
//
// "pillar-agent marks" lists and repairs the durable fencing marks in
// -generations-dir (the marks, the ledger of retired lifecycles and the
// decision table are described in package fencing). It is in the agent's
// binary, so the image needs nothing else; the work is done by the fencing
// store's own functions (package marks is only the command line). Its
// commands, and the operator's procedures for LIFECYCLE_REPLACED,
// MARK_UNREADABLE, UNMARKED, a damaged ledger and retiring tombstones, are
// in docs/runbooks/fencing-marks.md.
package app
