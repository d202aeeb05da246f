package main

import (
	"flag"
	"io"
	"log/slog"
	"testing"

	"github.com/pillar-csi/pillar-csi/api/flagalias"
)

func TestFlagsAndDeprecatedAliases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		endpoint string
		format   string
		level    slog.Level
		used     int
	}{
		{name: "defaults", endpoint: "unix:///csi/csi.sock", format: "json"},
		{name: "shared names", args: []string{"-csi-endpoint=unix:///p/csi.sock", "-log-format=text", "-log-level=debug"},
			endpoint: "unix:///p/csi.sock", format: "text", level: slog.LevelDebug},
		{name: "the old -endpoint still works", args: []string{"-endpoint", "unix:///old/csi.sock"},
			endpoint: "unix:///old/csi.sock", format: "json", used: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c config
			fs := flag.NewFlagSet("pillar-node", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			registerFlags(fs, &c)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if c.endpoint != tc.endpoint || c.logFormat != tc.format || c.logLevel != tc.level {
				t.Errorf("endpoint %q, format %q, level %v; want %q, %q, %v", c.endpoint, c.logFormat, c.logLevel, tc.endpoint, tc.format, tc.level)
			}
			if u := flagalias.Used(fs); len(u) != tc.used || (tc.used == 1 && u[0] != flagalias.Alias{Old: "endpoint", New: "csi-endpoint"}) {
				t.Errorf("aliases used %v, want %d", u, tc.used)
			}
		})
	}
}
