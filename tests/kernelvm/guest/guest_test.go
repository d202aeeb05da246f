package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Fatal records the message and stops the
// calling goroutine, like the real one, so the code under test cannot run on.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(t *testing.T, path string) *recorder {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		requireGuest(r, path)
	}()
	<-done
	return r
}

func writeCmdline(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cmdline")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRequireGuest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmdline string
		want    bool // want a failure
	}{
		{"marker", "console=ttyS0 quiet pillar.lab=1 panic=-1\n", false},
		{"marker last", "console=ttyS0 pillar.lab=1\n", false},
		{"no marker", "BOOT_IMAGE=/vmlinuz root=/dev/vda ro\n", true},
		{"marker as prefix", "pillar.lab=10\n", true},
		{"marker inside value", "foo=pillar.lab=1\n", true},
		{"empty", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, writeCmdline(t, tc.cmdline))
			if r.failed != tc.want {
				t.Fatalf("failed = %v, want %v (msg %q)", r.failed, tc.want, r.msg)
			}
			if r.failed && !strings.Contains(r.msg, "run it with make test-kernel") {
				t.Errorf("message %q does not say how to run the test", r.msg)
			}
		})
	}
}

func TestRequireGuestUnreadable(t *testing.T) {
	r := run(t, filepath.Join(t.TempDir(), "missing"))
	if !r.failed || !strings.Contains(r.msg, "make test-kernel") {
		t.Fatalf("failed = %v, msg %q; want a failure naming make test-kernel", r.failed, r.msg)
	}
}

// On the real /proc/cmdline, RequireGuest agrees with InLab: it fails on
// every host that runs the ordinary suite, and passes in the lab (where the
// kernel-tagged build of this package also runs).
func TestRealCmdline(t *testing.T) {
	r := run(t, cmdlinePath)
	if r.failed == InLab() {
		t.Fatalf("RequireGuest failed = %v, InLab = %v (msg %q)", r.failed, InLab(), r.msg)
	}
}
