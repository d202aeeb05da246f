package flagdoc

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMarkdown(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("b-file", "", "`path` of a | file")
	fs.Duration("a-period", 3*time.Second, "how\nlong")
	got := string(Markdown("pillar-x", "What x is.", fs))
	for _, want := range []string{
		"# pillar-x flags\n",
		"What x is.\n\n| flag | default | meaning |",
		"| `-a-period duration` | `3s` | how long |\n| `-b-file path` | none | path of a \\| file |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, got)
		}
	}
}

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ref.md")
	t.Setenv(UpdateEnv, "1")
	Check(t, path, []byte("one"))
	if b, err := os.ReadFile(path); err != nil || string(b) != "one" {
		t.Fatalf("with %s=1 Check wrote %q, %v", UpdateEnv, b, err)
	}
	t.Setenv(UpdateEnv, "")
	var stale recorder
	Check(&stale, path, []byte("two"))
	if !stale.failed {
		t.Error("Check accepted a stale reference")
	}
	var fresh recorder
	Check(&fresh, path, []byte("one"))
	if fresh.failed {
		t.Error("Check refused a fresh reference")
	}
}

// recorder is a testing.TB that records a failure instead of failing.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true }
