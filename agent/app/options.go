package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/agent/server"
	"github.com/pillar-csi/pillar-csi/agent/tlsconfig"
	"github.com/pillar-csi/pillar-csi/api/logging"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/configfs"
)

// Defaults of the options, as the flags show them.
const (
	// DefaultListenAddress serves gRPC on every address on the port of
	// export.DefaultAgentPort (9420), the port a PillarAgent names when
	// it names none. The agent runs with hostNetwork, so this is the
	// node's own port.
	DefaultListenAddress = ":9420"
	// DefaultMetricsAddress serves /metrics, /healthz and /readyz.
	DefaultMetricsAddress = ":9421"
	// DefaultCommandTimeout bounds each zfs, zpool and lvm command.
	DefaultCommandTimeout = 2 * time.Minute
	// DefaultShutdownGracePeriod is how long in-flight calls may run
	// after SIGTERM, while new ones are refused. It covers the longest
	// command with a minute to spare: an lvcreate killed half-way leaves a
	// thin LV that no retry repairs. The pod's
	// terminationGracePeriodSeconds must be longer still (the chart adds
	// 30 s), so the fencing store is closed before SIGKILL.
	DefaultShutdownGracePeriod = DefaultCommandTimeout + time.Minute
	// DefaultReadinessInterval is how often Ready is asked.
	DefaultReadinessInterval = 5 * time.Second
	// DefaultDriftInterval is how often the agent checks that the exports
	// it made are still in nvmet. A connected host queues its I/O and
	// reconnects every reconnect_delay (10 s by default) until its
	// controller-loss timeout (600 s by default, or the PillarProtocol's
	// connect.ctrlLossTimeoutSeconds), so an export put back within a few
	// seconds costs it a pause, not an I/O error.
	DefaultDriftInterval = 5 * time.Second
)

// NodeNameEnv is the environment variable the node name is taken from when
// -node-name is not given; the DaemonSet sets it from spec.nodeName.
const NodeNameEnv = "NODE_NAME"

// Options configure Run. ParseFlags fills them from the command line;
// DefaultOptions returns the defaults.
type Options struct {
	// ListenAddress is the gRPC host:port.
	ListenAddress string
	// NodeName is the Kubernetes node the agent runs on. Required.
	NodeName string
	// Version is reported by GetAgentInfo and pillar_agent_build_info.
	Version string
	// GenerationsDir holds the durable fencing marks.
	GenerationsDir string
	// ConfigfsRoot is where configfs is mounted.
	ConfigfsRoot string
	// MetricsAddress is the HTTP host:port of /metrics, /healthz and
	// /readyz; empty turns the HTTP server off.
	MetricsAddress string
	// LogLevel is the lowest level logged.
	LogLevel slog.Level
	// LogFormat is "json" or "text".
	LogFormat string
	// TLS names the server certificate, key and client CA files: all three
	// turn mutual TLS on, none leaves gRPC in plaintext.
	TLS tlsconfig.Files
	// TLSClientName, with mutual TLS, is the name a client certificate
	// must carry (its common name or a DNS name); empty accepts any
	// certificate of the CA.
	TLSClientName string
	// TokenDir holds the tokens a call must carry one of (every file of
	// it, as a mounted Secret; agentauth.Accepted). Empty accepts calls
	// without a token, which only mutual TLS or AllowUnauthenticated
	// permit.
	TokenDir string
	// AllowUnauthenticated lets the agent serve plaintext gRPC without a
	// token: any client that reaches the port may call it. For a lab on
	// loopback only.
	AllowUnauthenticated bool
	// ShutdownGracePeriod is how long in-flight calls may finish after
	// the context is cancelled, before the remaining ones are cut.
	ShutdownGracePeriod time.Duration
	// CommandTimeout bounds each backend command.
	CommandTimeout time.Duration
	// StoreConcurrency is how many backend changes, and as many look-ups,
	// run at once per store; further calls wait their turn within their
	// deadline.
	StoreConcurrency int
	// HostRoot, if not empty, is the host's root filesystem mounted into
	// the container; zfs, zpool and lvm are the host's, run chrooted
	// into it.
	HostRoot string
	// LVMReject are device-path regular expressions LVM must never scan
	// (each an r|…| entry of LVM's global_filter).
	LVMReject []string
	// PrintVersion is -version: print the version and exit, nothing
	// else is checked.
	PrintVersion bool
	// ReadinessInterval is how often the service's Ready is asked; the
	// gRPC health status and /readyz follow the answer.
	ReadinessInterval time.Duration
	// DriftInterval is how often the exports the agent made are checked
	// in nvmet and those something else removed put back; 0 turns the
	// check off.
	DriftInterval time.Duration
	// LogOutput receives the logs; os.Stderr if nil.
	LogOutput io.Writer

	// listening, if set, is told the addresses Run is bound to (tests
	// listen on port 0).
	listening func(grpcAddr, metricsAddr net.Addr)
}

// DefaultOptions returns the options pillar-agent runs with when no flag is
// given (NodeName and Version stay empty).
func DefaultOptions() Options {
	return Options{
		ListenAddress:       DefaultListenAddress,
		GenerationsDir:      server.DefaultGenerationsDir,
		ConfigfsRoot:        configfs.DefaultRoot,
		MetricsAddress:      DefaultMetricsAddress,
		LogLevel:            slog.LevelInfo,
		LogFormat:           logging.FormatJSON,
		ShutdownGracePeriod: DefaultShutdownGracePeriod,
		CommandTimeout:      DefaultCommandTimeout,
		StoreConcurrency:    server.DefaultStoreConcurrency,
		ReadinessInterval:   DefaultReadinessInterval,
		DriftInterval:       DefaultDriftInterval,
	}
}

const usageHeader = `Usage: pillar-agent [flags]

pillar-agent serves the pillar-csi agent gRPC API on a storage node: it
creates ZFS zvols and LVM logical volumes, exports them over NVMe-oF/TCP
through the kernel's nvmet configfs, and fences stale requests with durable
generation marks. It serves plaintext gRPC unless all three -tls-* files are
given, in which case clients must present a certificate signed by the CA.
Every call but health must carry one of the tokens in -token-dir; without
mutual TLS, -token-dir is required (or -allow-unauthenticated, which lets
any client that reaches the port call the agent).

pillar-agent marks COMMAND inspects and repairs the fencing marks instead
(pillar-agent marks -h).

Flags:
`

// ParseFlags parses the command-line arguments (without the program name)
// into Options. getenv supplies $NODE_NAME when -node-name is absent. On
// -h or -help it writes the usage, listing every flag and its default, to
// output and returns flag.ErrHelp. Bad values are errors that name the
// flag; ParseFlags never exits and never panics.
func ParseFlags(args []string, getenv func(string) string, output io.Writer) (Options, error) {
	o := DefaultOptions()
	fs := newFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(output, usageHeader)
			fs.SetOutput(output)
			fs.PrintDefaults()
		}
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected argument %q: pillar-agent takes flags only, or the marks command first (see -h)", fs.Arg(0))
	}
	if o.PrintVersion {
		return o, nil
	}
	if o.NodeName == "" && getenv != nil {
		o.NodeName = getenv(NodeNameEnv)
	}
	if err := o.Validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// newFlagSet registers pillar-agent's flags on a new flag set that sets o.
// Parse errors are returned, not printed: the caller prints once. The
// reference of the flags is generated from it:
//
//go:generate env PILLAR_UPDATE_REFERENCE=1 go test -count=1 -run ^TestFlagReference$ .
func newFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("pillar-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "`host:port` to serve gRPC on")
	fs.StringVar(&o.NodeName, "node-name", "", "Kubernetes node this agent runs on (default $"+NodeNameEnv+")")
	fs.StringVar(&o.GenerationsDir, "generations-dir", o.GenerationsDir, "`directory` of the durable fencing marks (a hostPath on local disk)")
	fs.StringVar(&o.ConfigfsRoot, "configfs-root", o.ConfigfsRoot, "`directory` where configfs is mounted")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "`host:port` to serve /metrics, /healthz and /readyz on; empty turns the HTTP server off")
	logging.AddFlags(fs, &o.LogLevel, &o.LogFormat)
	fs.StringVar(&o.TLS.CertFile, "tls-cert-file", "", "PEM server certificate `file` (with -tls-key-file and -tls-ca-file: mutual TLS; default: plaintext)")
	fs.StringVar(&o.TLS.KeyFile, "tls-key-file", "", "PEM private key `file` of the server certificate")
	fs.StringVar(&o.TLS.CAFile, "tls-ca-file", "", "PEM CA bundle `file` that client certificates must chain to")
	fs.StringVar(&o.TLSClientName, "tls-client-name", "", "`name` a client certificate must carry, as its common name or a DNS name, besides chaining to -tls-ca-file (the chart sets pillar-controller's); empty accepts every certificate of the CA")
	fs.StringVar(&o.TokenDir, "token-dir", "", "`directory` whose every file is a token a call may carry (the chart mounts the agent-token Secret there); required without mutual TLS")
	fs.BoolVar(&o.AllowUnauthenticated, "allow-unauthenticated", false, "serve plaintext gRPC without -token-dir: any client that reaches the port may create, export and destroy volumes (a lab on loopback only)")
	fs.DurationVar(&o.ShutdownGracePeriod, "shutdown-grace-period", o.ShutdownGracePeriod, "how long in-flight calls may finish after SIGTERM or SIGINT")
	fs.DurationVar(&o.CommandTimeout, "command-timeout", o.CommandTimeout, "timeout of each zfs, zpool and lvm command")
	fs.IntVar(&o.StoreConcurrency, "store-concurrency", o.StoreConcurrency, "how many backend changes (creates, deletes, expansions, snapshots), and as many look-ups, run at once per store; further calls wait their turn for as long as their caller waits")
	fs.StringVar(&o.HostRoot, "host-root", "", "`directory` holding the host's root filesystem (in a container: the host's / mounted there); zfs, zpool and lvm are then the host's own, run chrooted into it, so they match the host's kernel module and LVM configuration (default: this machine's tools)")
	fs.BoolVar(&o.PrintVersion, "version", false, "print the version and exit")
	fs.Func("lvm-reject", "`regexp` of device paths LVM must never scan, such as ^/dev/zd (repeatable; each becomes an r|regexp| entry of the devices/global_filter of every lvm command, replacing the node's own global_filter for them)", func(v string) error {
		o.LVMReject = append(o.LVMReject, v)
		return nil
	})
	fs.DurationVar(&o.ReadinessInterval, "readiness-interval", o.ReadinessInterval, "how often readiness is checked for the gRPC health service and /readyz")
	fs.DurationVar(&o.DriftInterval, "drift-interval", o.DriftInterval, "how often the exports the agent made are checked in nvmet, and those something else removed put back (0: never)")
	return fs
}

// Validate reports the first option that cannot work, naming its flag.
func (o Options) Validate() error {
	if o.NodeName == "" {
		return fmt.Errorf("-node-name: required (or set $%s)", NodeNameEnv)
	}
	if strings.ContainsAny(o.NodeName, " \t\n/") {
		return fmt.Errorf("-node-name: %q is not a node name", o.NodeName)
	}
	if err := checkAddress(o.ListenAddress); err != nil {
		return fmt.Errorf("-listen-address: %w", err)
	}
	if o.MetricsAddress != "" {
		if err := checkAddress(o.MetricsAddress); err != nil {
			return fmt.Errorf("-metrics-address: %w", err)
		}
		if o.MetricsAddress == o.ListenAddress && !strings.HasSuffix(o.ListenAddress, ":0") {
			return fmt.Errorf("-metrics-address: %q is also the gRPC -listen-address", o.MetricsAddress)
		}
	}
	if o.GenerationsDir == "" {
		return errors.New("-generations-dir: must not be empty")
	}
	if o.ConfigfsRoot == "" {
		return errors.New("-configfs-root: must not be empty")
	}
	if err := logging.CheckFormat(o.LogFormat); err != nil {
		return fmt.Errorf("-log-format: %w", err)
	}
	if m := o.TLS.Missing(); len(m) > 0 && len(m) < 3 {
		flags := make([]string, len(m))
		for i, n := range m {
			flags[i] = "-tls-" + n + "-file"
		}
		return fmt.Errorf("-tls-cert-file, -tls-key-file and -tls-ca-file go together: %s missing", strings.Join(flags, " and "))
	}
	if o.TLSClientName != "" && !o.TLSEnabled() {
		return errors.New("-tls-client-name: needs mutual TLS (-tls-cert-file, -tls-key-file and -tls-ca-file): without it no client certificate is asked for")
	}
	if o.ShutdownGracePeriod < 0 {
		return fmt.Errorf("-shutdown-grace-period: %v is negative", o.ShutdownGracePeriod)
	}
	if o.CommandTimeout <= 0 {
		return fmt.Errorf("-command-timeout: %v must be positive", o.CommandTimeout)
	}
	if o.StoreConcurrency < 1 {
		return fmt.Errorf("-store-concurrency: %d must be at least 1", o.StoreConcurrency)
	}
	if o.DriftInterval < 0 {
		return fmt.Errorf("-drift-interval: %v is negative", o.DriftInterval)
	}
	if o.ReadinessInterval <= 0 {
		return fmt.Errorf("-readiness-interval: %v must be positive", o.ReadinessInterval)
	}
	if o.HostRoot != "" && !filepath.IsAbs(o.HostRoot) {
		return fmt.Errorf("-host-root: %q is not an absolute path", o.HostRoot)
	}
	if len(o.LVMReject) > 0 {
		// The backend's own check; New runs nothing.
		if _, err := lvm.New(lvm.Config{VolumeGroup: "check", RejectDevices: o.LVMReject}); err != nil {
			return fmt.Errorf("-lvm-reject: %w", errors.Unwrap(err))
		}
	}
	if o.TokenDir == "" && !o.TLSEnabled() && !o.AllowUnauthenticated {
		return errors.New("-token-dir: required without mutual TLS; the agent API creates, exports and destroys volumes, " +
			"so a plaintext agent without a token would obey any client that reaches its port (-allow-unauthenticated if that is meant)")
	}
	return nil
}

// TLSEnabled reports whether the options turn mutual TLS on.
func (o Options) TLSEnabled() bool { return len(o.TLS.Missing()) == 0 }

func checkAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	} else if n == 0 && host == "" {
		return fmt.Errorf("%q: port 0 on every address is not something a client can find", addr)
	}
	if host != "" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: %q is not a host", addr, host)
	}
	return nil
}
