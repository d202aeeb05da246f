package main

import (
	"flag"
	"io"
	"log/slog"
	"testing"

	"github.com/pillar-csi/pillar-csi/api/flagalias"
	"github.com/pillar-csi/pillar-csi/api/flagdoc"
)

func TestFlagsAndDeprecatedAliases(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		endpoint   string
		kubeletDir string
		format     string
		level      slog.Level
		used       int
	}{
		{name: "defaults", endpoint: "unix:///csi/csi.sock", kubeletDir: "/var/lib/kubelet", format: "json"},
		{name: "a moved kubelet directory", args: []string{"-kubelet-dir=/var/lib/k0s/kubelet"},
			endpoint: "unix:///csi/csi.sock", kubeletDir: "/var/lib/k0s/kubelet", format: "json"},
		{name: "shared names", args: []string{"-csi-endpoint=unix:///p/csi.sock", "-log-format=text", "-log-level=debug"},
			endpoint: "unix:///p/csi.sock", kubeletDir: "/var/lib/kubelet", format: "text", level: slog.LevelDebug},
		{name: "the old -endpoint still works", args: []string{"-endpoint", "unix:///old/csi.sock"},
			endpoint: "unix:///old/csi.sock", kubeletDir: "/var/lib/kubelet", format: "json", used: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c config
			fs := flag.NewFlagSet("pillar-node", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			registerFlags(fs, &c)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if c.endpoint != tc.endpoint || c.kubeletDir != tc.kubeletDir || c.logFormat != tc.format || c.logLevel != tc.level {
				t.Errorf("endpoint %q, kubelet dir %q, format %q, level %v; want %q, %q, %q, %v", c.endpoint, c.kubeletDir, c.logFormat, c.logLevel,
					tc.endpoint, tc.kubeletDir, tc.format, tc.level)
			}
			if u := flagalias.Used(fs); len(u) != tc.used || (tc.used == 1 && u[0] != flagalias.Alias{Old: "endpoint", New: "csi-endpoint"}) {
				t.Errorf("aliases used %v, want %d", u, tc.used)
			}
		})
	}
}

// TestFlagReference keeps docs/reference/pillar-node-flags.md equal to
// the flags pillar-node registers (make generate rewrites it).
func TestFlagReference(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	var c config
	fs := flag.NewFlagSet("pillar-node", flag.ContinueOnError)
	registerFlags(fs, &c)
	flagdoc.Check(t, "../../../docs/reference/pillar-node-flags.md", flagdoc.Markdown("pillar-node",
		"pillar-node runs on each worker (the chart's DaemonSet, privileged, beside the node-driver-registrar): it serves "+
			"CSI's Node service, connecting, staging and mounting volumes for kubelet. `pillar-node -h` prints the same list. "+
			"The default of -node-name, shown as none, is `$NODE_NAME`.", fs))
}
