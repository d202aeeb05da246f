package app

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The controller dials a PillarAgent on its spec.port, which defaults to
// export.DefaultAgentPort; an agent started without flags must be there.
func TestDefaultListenPortIsTheAgentPort(t *testing.T) {
	_, port, err := net.SplitHostPort(DefaultListenAddress)
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(export.DefaultAgentPort); port != want {
		t.Fatalf("DefaultListenAddress %q listens on port %s, PillarAgent's default port is %s", DefaultListenAddress, port, want)
	}
}

func TestParseFlagsDefaults(t *testing.T) {
	// Only -token-dir has no default that works.
	o, err := ParseFlags([]string{"-token-dir", "/t"}, env(map[string]string{"NODE_NAME": "storage-1"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.NodeName = "storage-1"
	if o.ListenAddress != ":9420" || o.MetricsAddress != ":9421" || o.GenerationsDir != "/var/lib/pillar-csi/agent/generations" ||
		o.ConfigfsRoot != "/sys/kernel/config" || o.LogFormat != "json" || o.LogLevel != slog.LevelInfo || o.TLSEnabled() {
		t.Fatalf("defaults = %+v", o)
	}
	if o.NodeName != want.NodeName || o.ShutdownGracePeriod != want.ShutdownGracePeriod || o.CommandTimeout != want.CommandTimeout || o.ReadinessInterval != want.ReadinessInterval ||
		o.StoreConcurrency != 4 {
		t.Fatalf("defaults = %+v, want %+v", o, want)
	}
}

func TestParseFlagsEverything(t *testing.T) {
	o, err := ParseFlags([]string{
		"-listen-address", "10.0.0.5:7000", "-node-name", "n2", "-generations-dir", "/g", "-configfs-root", "/c",
		"-metrics-address", "", "-log-level", "debug", "-log-format", "text",
		"-tls-cert-file", "/t/crt", "-tls-key-file", "/t/key", "-tls-ca-file", "/t/ca", "-tls-client-name", "pillar-controller",
		"-shutdown-grace-period", "3s", "-command-timeout", "1m", "-readiness-interval", "1s", "-store-concurrency", "2",
		"-host-root", "/host", "-lvm-reject", "^/dev/zd", "-lvm-reject", "^/dev/nvme",
	}, env(map[string]string{"NODE_NAME": "from-env"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.ListenAddress != "10.0.0.5:7000" || o.NodeName != "n2" || o.GenerationsDir != "/g" || o.ConfigfsRoot != "/c" ||
		o.MetricsAddress != "" || o.LogLevel != slog.LevelDebug || o.LogFormat != "text" || !o.TLSEnabled() ||
		o.TLS.CAFile != "/t/ca" || o.TLSClientName != "pillar-controller" || o.ShutdownGracePeriod != 3*time.Second || o.CommandTimeout != time.Minute || o.ReadinessInterval != time.Second ||
		o.StoreConcurrency != 2 || o.HostRoot != "/host" || !slices.Equal(o.LVMReject, []string{"^/dev/zd", "^/dev/nvme"}) {
		t.Fatalf("parsed %+v", o)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	withNode := func(args ...string) []string { return append([]string{"-node-name", "n"}, args...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-node-name: required (or set $NODE_NAME)"},
		{withNode("-listen-address", "9420"), "-listen-address: \"9420\" is not host:port"},
		{withNode("-listen-address", ":99999"), "port \"99999\" is not a number from 0 to 65535"},
		{withNode("-listen-address", ":0"), "port 0 on every address"},
		{withNode("-metrics-address", "nope"), "-metrics-address"},
		{withNode("-metrics-address", ":9420"), "also the gRPC -listen-address"},
		{withNode("-log-level", "loud"), "invalid value \"loud\" for flag -log-level"},
		{withNode("-log-format", "xml"), "-log-format: \"xml\" is neither json nor text"},
		{withNode("-shutdown-grace-period", "soon"), "invalid value \"soon\" for flag -shutdown-grace-period"},
		{withNode("-shutdown-grace-period", "-1s"), "-shutdown-grace-period: -1s is negative"},
		{withNode("-command-timeout", "0s"), "-command-timeout: 0s must be positive"},
		{withNode("-readiness-interval", "0"), "-readiness-interval"},
		{withNode("-store-concurrency", "0"), "-store-concurrency: 0 must be at least 1"},
		{withNode("-generations-dir", ""), "-generations-dir: must not be empty"},
		{withNode("-tls-cert-file", "/a"), "-tls-key-file and -tls-ca-file missing"},
		{withNode("-tls-cert-file", "/a", "-tls-key-file", "/b"), ": -tls-ca-file missing"},
		{withNode("-tls-ca-file", "/c"), "-tls-cert-file and -tls-key-file missing"},
		{withNode("-tls-client-name", "pillar-controller", "-token-dir", "/t"), "-tls-client-name: needs mutual TLS"},
		{withNode("-no-such-flag"), "flag provided but not defined: -no-such-flag"},
		{withNode("serve"), "unexpected argument \"serve\""},
		{[]string{"-node-name", "a b"}, "is not a node name"},
		{withNode("-host-root", "host"), `-host-root: "host" is not an absolute path`},
		{withNode("-lvm-reject", "^/dev/(zd"), "-lvm-reject: invalid argument: rejected devices \"^/dev/(zd\""},
		{withNode("-lvm-reject", "a|b"), "without '|'"},
	} {
		_, err := ParseFlags(tc.args, env(nil), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFlags(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestParseFlagsHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseFlags([]string{"-h"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{
		"Usage: pillar-agent [flags]",
		"-listen-address host:port", `(default ":9420")`,
		"-node-name", "$NODE_NAME",
		"-generations-dir", `(default "/var/lib/pillar-csi/agent/generations")`,
		"-configfs-root", `(default "/sys/kernel/config")`,
		"-metrics-address", `(default ":9421")`,
		"-log-level", "(default INFO)",
		"-log-format", `(default "json")`,
		"-tls-cert-file", "-tls-key-file", "-tls-ca-file",
		"-shutdown-grace-period", "(default 3m0s)",
		"-command-timeout", "(default 2m0s)",
		"-store-concurrency", "(default 4)",
		"-readiness-interval", "(default 5s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}
