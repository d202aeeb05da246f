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
//	-store-concurrency n        backend calls at once per store; more wait while their caller does (default 4)
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
// the handshake. TLS 1.2 is the minimum; Go clients negotiate TLS 1.3.
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
// store's own functions (package marks is only the command line):
//
//	pillar-agent marks list [-o json]                 every mark: volume, state, lifecycle, generation, history; the ledger's size
//	pillar-agent marks show [-o json] VOLUME          one mark in full; for a damaged one, what can still be read from it
//	pillar-agent marks retire -grace D [-keep VOLUME]  remove tombstones that ended at least D ago
//	pillar-agent marks end -uid U VOLUME              end the mark's active lifecycle U (LIFECYCLE_REPLACED)
//	pillar-agent marks reset -uid U -generation G [-ended] [-accept-loss] VOLUME
//	                                                  replace a damaged mark (MARK_UNREADABLE)
//	pillar-agent marks adopt -uid U -generation G [-ended] VOLUME
//	                                                  write the lost mark of a volume that exists (UNMARKED)
//	pillar-agent marks reset-ledger [-accept-loss]    replace a damaged ledger, which stops the agent from starting
//
// Every command takes -generations-dir (default
// /var/lib/pillar-csi/agent/generations). Usage errors exit with status 2,
// refusals and failures with 1.
//
// list and show only read, and take no lock: the store replaces every file
// by an atomic rename, so each file is read whole, old or new, and reading
// changes nothing. They therefore run beside the agent, from its pod (the
// image has no shell; the binary is the command):
//
//	kubectl -n NAMESPACE exec POD -c pillar-agent -- pillar-agent marks list
//
// A listing is not one snapshot of the directory, and can be out of date a
// moment later; that is why the commands that write decide nothing from
// it. They take the directory's exclusive lock, as the agent does, and
// check everything again under it. The lock is also why they refuse to run
// while an agent runs on the node (after -lock-timeout, default 5 s):
// two writers would each decide against marks the other is changing.
// Without -yes they print what they would change, checked under the lock,
// and write nothing; with -yes they print what they changed.
//
// # Stopping the agent on one node
//
// With the chart, take the node out of the DaemonSet's nodeSelector: the
// DaemonSet controller then deletes that node's agent pod (its SIGTERM
// closes the store and releases the lock), and no other storage node is
// touched. Editing the DaemonSet itself would restart every agent. With
// the chart's default selector:
//
//	kubectl label node NODE pillar-csi.io/storage-node-
//	kubectl -n NAMESPACE get pods -l app.kubernetes.io/component=agent --field-selector spec.nodeName=NODE   # until none is left
//	kubectl -n NAMESPACE get daemonset -l app.kubernetes.io/component=agent -o jsonpath='{.items[0].spec.template.spec.containers[0].image}'
//	kubectl debug node/NODE -it --image=IMAGE -- pillar-agent marks COMMAND -generations-dir /host/var/lib/pillar-csi/agent/generations ...
//	kubectl label node NODE pillar-csi.io/storage-node=true
//
// kubectl debug runs the same image (so the same release of the tool) as
// root with the node's "/" mounted at /host; use the chart's
// agent.generationsDir after /host if it was changed, and delete the
// node-debugger pod afterwards. A root shell on the node with a
// pillar-agent binary of the same release works as well. While the agent
// is stopped, the node's exports keep serving I/O (nvmet's configuration
// is kernel state), but nothing on the node is created, published, expanded
// or deleted: the controller's calls fail as unreachable and are retried
// once the agent is back.
//
// # LIFECYCLE_REPLACED: end the lifecycle the cluster no longer has
//
// Every request of the volume's current PillarVolumeState is refused with
// LIFECYCLE_REPLACED when the mark's active lifecycle U belongs to an
// object that was deleted without its DeleteVolume reaching the agent
// (typically a finalizer removed by hand, and the volume ID reused). The
// agent's "refused by fencing" log line names both UIDs (the presented
// token's and the mark's; "pillar-agent marks show VOLUME" prints the
// mark too). First make sure the mark is the stale side:
//
//	kubectl get pillarvolumestate VOLUME -o jsonpath='{.metadata.uid}'
//
// If that prints the mark's UID, the refused request is the stale one and
// fencing is doing its job: change nothing. Otherwise, with the agent
// stopped, run "pillar-agent marks end -uid U VOLUME", read what it would
// do, and run it again with -yes; then start the agent. The controller's
// next retry is admitted as a new lifecycle (rule 16).
//
// end changes the mark exactly as an accepted DeleteVolume of U at the
// mark's own generation would (rule 9): the mark becomes a tombstone and U
// joins its history. From then on U is refused for ever (LIFECYCLE_ENDED,
// rules 10, 12 and 15), as after any deletion; until another lifecycle
// begins, a retried DeleteVolume of U is still accepted (rule 14), as after
// any deletion too. -uid must be the mark's own active lifecycle: any other
// UID, a volume without a mark and an unreadable mark are refused, so end
// can only retire a lifecycle, never install or switch one; the new
// lifecycle is admitted by the agent's ordinary rules when it asks. end
// does not touch the volume's storage: the new lifecycle's CreateVolume
// adopts a backend volume of that ID that is large enough, so if U's data
// must not reach it, destroy the zvol or LV by hand before starting the
// agent.
//
// # MARK_UNREADABLE: reset a damaged mark
//
// A mark that fails its checksum, or cannot be read, makes the agent refuse
// every request of its volume. "pillar-agent marks show VOLUME" prints the
// error and what can still be read from the file. Read the lifecycle from
// the cluster:
//
//	kubectl get pillarvolumestate VOLUME -o jsonpath='{.metadata.uid} {.spec.publicationGeneration} {.metadata.deletionTimestamp}'
//
// With the agent stopped, run "pillar-agent marks reset -uid UID
// -generation GENERATION VOLUME", adding -ended if the object has a
// deletionTimestamp (its DeleteVolume may already have ended the lifecycle
// on the node). Read what it would do; run it again with -yes, and with
// -accept-loss if it says so (see below); restart pillar-controller
// (kubectl rollout restart on its Deployment) and start the agent. If no
// PillarVolumeState of that name exists, nothing uses the volume ID: the
// damaged mark only refuses requests for it, and may be left as it is.
//
// The damaged file is kept under damaged/ in the directory (a hard link:
// even a file whose blocks cannot be read is kept), every lifecycle that
// can still be read from it, other than UID, is written to the ledger as
// ended, and the new mark then replaces the damaged one atomically. A crash
// at any point leaves the damaged mark (refusing everything) or the new
// one, never no mark. What stays refused afterwards:
//
//   - every other lifecycle: LIFECYCLE_REPLACED while UID holds the volume,
//     LIFECYCLE_ENDED for those written to the ledger;
//   - UID below GENERATION: STALE_GENERATION. The controller advances
//     publicationGeneration by compare-and-swap before every call, so the
//     damaged mark's generation was at most GENERATION, and nothing it
//     refused as stale is admitted now;
//   - with -ended, every change of UID (LIFECYCLE_ENDED); its DeleteVolume
//     retries are accepted, so a deletion in progress finishes.
//
// What is given up is the damaged mark's history: lifecycles that ended on
// this volume before the damage. Those read back from the file stay
// refused through the ledger. One that cannot be read back is refused while
// UID is active, but once UID ends it would be admitted as a new lifecycle
// (rule 16) if a controller still sent its requests. Hence -accept-loss,
// required unless the file's checksum matched and its history read back
// whole, and the controller restart: such a request could only come from a
// controller process that has run since before that lifecycle's
// PillarVolumeState was deleted (or from an etcd backup restored from
// before it), and a restarted controller holds no such token.
//
// reset refuses, writing nothing: a mark that can be read (reset never
// switches a mark to another lifecycle; LIFECYCLE_REPLACED is end's job), a
// volume without a mark file, a UID the ledger lists as retired, a damaged
// file that lists UID as ended unless -ended (an active mark would let it
// write again), a GENERATION below the one an intact file records for UID,
// and a file of a later format version (run the later release's tool).
//
// # UNMARKED: adopt a volume whose mark was lost
//
// A volume that exists on the storage node (its zvol or LV, or its nvmet
// subsystem) but has no mark is refused for every change, whatever the
// token (rule 19 of the fencing table): its mark was lost, with a wiped or
// replaced -generations-dir, or a disk that was not mounted when the agent
// started. Without the rule the first token to arrive, even a made-up one,
// would own the volume, and a DeleteVolume would destroy it. The agent
// logs "refused by fencing" with reason UNMARKED; the controller records a
// FencingRefused event on the PillarVolumeState. Exports keep serving I/O:
// nvmet's configuration is kernel state. New volumes are created as
// usual.
//
// Find out first why the marks are gone (pillar-agent marks list shows
// what the directory holds; is it the right disk?): if the old directory
// can be mounted back, do that and restart the agent instead. Otherwise,
// for each refused volume whose PillarVolumeState exists, read its
// lifecycle from the cluster:
//
//	kubectl get pillarvolumestate VOLUME -o jsonpath='{.metadata.uid} {.spec.publicationGeneration} {.metadata.deletionTimestamp}'
//
// With the agent stopped, run "pillar-agent marks adopt -uid UID
// -generation GENERATION VOLUME" (-ended if the object has a
// deletionTimestamp), read what it would write, and run it again with
// -yes; restart pillar-controller and start the agent. The volume is then
// fenced as before for that lifecycle: any other UID is refused
// (LIFECYCLE_REPLACED), UID below GENERATION too (STALE_GENERATION). adopt
// refuses a volume that has a mark file (readable or not) and a UID the
// ledger lists as retired. A volume that no PillarVolumeState names is not
// the cluster's: leave it refused, and destroy it by hand once you know
// whose it was.
//
// The lost directory's identity went with it: the new store draws another
// (store.id), and pillar-controller, which pinned the old one, sends
// nothing to this agent until the PillarAgent is annotated
// pillar-csi.io/accept-marks-store=<new identity> ("pillar-agent marks
// list" prints it); accept it last, after the adoptions.
//
// What the lost directory knew and the cluster does not is gone with it:
// the lifecycles of deleted volumes (their tombstones and the ledger). A
// controller that still held a token of such a lifecycle could have its
// late CreateVolume admitted as new; the controller restart above ends
// every such process, and pillar-controller never reuses a volume ID.
//
// # A damaged ledger
//
// The agent does not start when its ledger of retired lifecycles cannot be
// read ("fencing: open (.../retired.ledger): corrupt fencing mark:
// ledger: ..."), because without it a retired lifecycle would look new;
// "pillar-agent marks list" reports "ledger: UNREADABLE". With the agent
// stopped, run "pillar-agent marks reset-ledger", then again with -yes
// -accept-loss; restart pillar-controller and start the agent.
//
// The ledger has a single checksum over the whole file and its records are
// 16-byte fingerprints of (volume ID, lifecycle UID), so once the checksum
// fails nothing tells a damaged record from an intact one, and nothing
// names the volume of a lost one. reset-ledger keeps every whole record,
// damaged or not (a damaged one can only refuse a lifecycle that never
// existed), and keeps the damaged file under damaged/. A record that was
// damaged or cut off is lost: that retired lifecycle could be admitted
// again as a new lifecycle of its volume. Refusing new lifecycles on
// "affected volumes" is not possible, since no record says which they are,
// and refusing them on every volume without a mark would refuse every new
// volume of the node; so the loss is accepted explicitly and the
// controller restarted, as for a damaged mark. The agent itself never
// retires tombstones: the ledger grows only by "marks retire" and when a
// volume ID has had more than 16 ended lifecycles, so on most nodes it is
// small or absent.
//
// # Retiring tombstones
//
// A deleted volume leaves a tombstone, a small file. "pillar-agent marks
// retire -grace 720h" (then with -yes) removes the tombstones of
// lifecycles that ended at least the grace ago, after writing each of their
// lifecycles to the ledger, so none of them is ever admitted again
// (fencing.Store.Retire). After retirement a retried DeleteVolume of such a
// lifecycle is refused with LIFECYCLE_ENDED, and pillar-controller does not
// take that for success: a PillarVolumeState whose deletion was still
// being retried would stay, failing. So choose a grace longer than any
// deletion could still be retrying, and -keep every volume whose
// PillarVolumeState still exists (kubectl get pillarvolumestates) or whose
// storage is known to remain.
//
// Damaged files kept by reset and reset-ledger stay under damaged/; the
// agent never reads them, and they can be removed once examined.
package app
