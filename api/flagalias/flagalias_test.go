package flagalias

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func newFlags() (*flag.FlagSet, *string, *time.Duration, *bool) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ep := fs.String("csi-endpoint", "unix:///csi/csi.sock", "CSI endpoint")
	grace := fs.Duration("shutdown-grace-period", 25*time.Second, "grace")
	le := fs.Bool("leader-elect", false, "elect")
	Add(fs, "endpoint", "csi-endpoint")
	Add(fs, "graceful-shutdown", "shutdown-grace-period")
	Add(fs, "elect", "leader-elect")
	return fs, ep, grace, le
}

func TestAliasSetsTheNewFlag(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantEP    string
		wantGrace time.Duration
		wantLE    bool
		wantUsed  []Alias
	}{
		{name: "defaults", wantEP: "unix:///csi/csi.sock", wantGrace: 25 * time.Second},
		{name: "new names", args: []string{"-csi-endpoint=unix:///a", "-shutdown-grace-period=5s", "-leader-elect"},
			wantEP: "unix:///a", wantGrace: 5 * time.Second, wantLE: true},
		{name: "old names", args: []string{"-endpoint", "unix:///b", "-graceful-shutdown=7s", "-elect"},
			wantEP: "unix:///b", wantGrace: 7 * time.Second, wantLE: true,
			wantUsed: []Alias{{"elect", "leader-elect"}, {"endpoint", "csi-endpoint"}, {"graceful-shutdown", "shutdown-grace-period"}}},
		{name: "bool alias with a value", args: []string{"-leader-elect", "-elect=false"}, wantEP: "unix:///csi/csi.sock", wantGrace: 25 * time.Second,
			wantUsed: []Alias{{"elect", "leader-elect"}}},
		{name: "the last one given wins", args: []string{"-csi-endpoint=unix:///new", "-endpoint=unix:///old"},
			wantEP: "unix:///old", wantGrace: 25 * time.Second, wantUsed: []Alias{{"endpoint", "csi-endpoint"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, ep, grace, le := newFlags()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if *ep != tc.wantEP || *grace != tc.wantGrace || *le != tc.wantLE {
				t.Errorf("got %q %v %v, want %q %v %v", *ep, *grace, *le, tc.wantEP, tc.wantGrace, tc.wantLE)
			}
			used := Used(fs)
			if len(used) != len(tc.wantUsed) {
				t.Fatalf("Used = %v, want %v", used, tc.wantUsed)
			}
			for i := range used {
				if used[i] != tc.wantUsed[i] {
					t.Errorf("Used = %v, want %v", used, tc.wantUsed)
				}
			}
		})
	}
}

func TestAliasRejectsWhatTheNewFlagRejects(t *testing.T) {
	fs, _, _, _ := newFlags()
	if err := fs.Parse([]string{"-graceful-shutdown=soon"}); err == nil || !strings.Contains(err.Error(), "-graceful-shutdown") {
		t.Fatalf("Parse = %v, want an error naming -graceful-shutdown", err)
	}
}

func TestHelpSaysDeprecated(t *testing.T) {
	fs, _, _, _ := newFlags()
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.PrintDefaults()
	help := out.String()
	for _, want := range []string{"-endpoint value\n    \tdeprecated: use -csi-endpoint", "deprecated: use -shutdown-grace-period", "-elect\n    \tdeprecated: use -leader-elect"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "panic") {
		t.Errorf("help reports a panic:\n%s", help)
	}
}

func TestWarnLogsEachAliasUsed(t *testing.T) {
	fs, _, _, _ := newFlags()
	if err := fs.Parse([]string{"-endpoint=unix:///x", "-shutdown-grace-period=1s"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	Warn(fs, slog.New(slog.NewTextHandler(&buf, nil)))
	out := buf.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "flag=-endpoint use=-csi-endpoint") {
		t.Fatalf("log %q: want one warning for -endpoint", out)
	}
}

func TestAddPanicsWithoutTheNewFlag(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	Add(flag.NewFlagSet("x", flag.ContinueOnError), "old", "missing")
}
