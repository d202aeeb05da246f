package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/flagalias"
	"github.com/pillar-csi/pillar-csi/api/flagdoc"
	"github.com/pillar-csi/pillar-csi/csidriver/controllerapp"
)

func TestFlagsAndDeprecatedAliases(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		grace  time.Duration
		format string
		level  slog.Level
		used   []flagalias.Alias
	}{
		{name: "defaults", grace: controllerapp.DefaultGracefulShutdown, format: "json"},
		{name: "shared names", args: []string{"-shutdown-grace-period=5s", "-log-format=text", "-log-level=warn"},
			grace: 5 * time.Second, format: "text", level: slog.LevelWarn},
		{name: "the old -graceful-shutdown still works", args: []string{"-graceful-shutdown", "7s"},
			grace: 7 * time.Second, format: "json", used: []flagalias.Alias{{Old: "graceful-shutdown", New: "shutdown-grace-period"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("pillar-controller", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := registerFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if f.o.GracefulShutdown != tc.grace || f.logFormat != tc.format || f.logLevel != tc.level {
				t.Errorf("grace %v, format %q, level %v; want %v, %q, %v", f.o.GracefulShutdown, f.logFormat, f.logLevel, tc.grace, tc.format, tc.level)
			}
			u := flagalias.Used(fs)
			if len(u) != len(tc.used) || (len(u) == 1 && u[0] != tc.used[0]) {
				t.Errorf("aliases used %v, want %v", u, tc.used)
			}
		})
	}
}

// TestFlagReference keeps docs/reference/pillar-controller-flags.md equal
// to the flags pillar-controller registers (make generate rewrites it).
func TestFlagReference(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	fs := flag.NewFlagSet("pillar-controller", flag.ContinueOnError)
	registerFlags(fs)
	flagdoc.Check(t, "../../../docs/reference/pillar-controller-flags.md", flagdoc.Markdown("pillar-controller",
		"pillar-controller runs as the chart's leader-elected Deployment beside the CSI sidecars: it reconciles the Pillar "+
			"resources and serves CSI's Controller service, calling the agents. `pillar-controller -h` prints the same list. "+
			"Defaults shown as none for -namespace and -tls-secret-namespaces are `$POD_NAMESPACE`.", fs))
}

// TestClientNotRateLimited holds what the chart and the docs say of
// pillar-controller's API client (kubeConfig, which run uses): it has no
// client-side rate limiter, so there is no QPS value to raise for a burst
// of claims.
func TestClientNotRateLimited(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	cfg, err := kubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS >= 0 || cfg.RateLimiter != nil {
		t.Errorf("QPS %v, rate limiter %v: pillar-controller's client is rate-limited on its side; the chart's values and docs/troubleshooting.md say it is not", cfg.QPS, cfg.RateLimiter)
	}
}
