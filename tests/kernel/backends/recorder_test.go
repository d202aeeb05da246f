//go:build kernel

package backends

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
)

var capture = flag.Bool("backends.capture", false,
	"write every command the backends run, with its output, under the lab run's out/captures")

// recorder runs commands for real and counts them; with -backends.capture
// it also writes each one as a capture file for the backends module's unit
// tests, named STORE/LABEL.N.txt, with the fixtures' random pool and
// volume group names replaced by stable ones.
type recorder struct {
	command.Exec
	runs atomic.Int64

	mu    sync.Mutex
	dir   string // "" when not capturing
	label string // "" while a step is not recorded
	n     int
	subst *strings.Replacer
	note  string
}

func newRecorder(t testing.TB, store string, subst ...string) *recorder {
	r := &recorder{subst: strings.NewReplacer(subst...)}
	if !*capture {
		return r
	}
	out, err := runOutDir()
	if err != nil {
		t.Fatalf("-backends.capture: %v", err)
	}
	r.dir = filepath.Join(out, "captures", store)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.note = fmt.Sprintf("Captured in the kernel lab (Linux %s, %s) by tests/kernel/backends\n"+
		"with -backends.capture. Random fixture names are replaced by stable ones.\n", kernelRelease(), toolVersions())
	return r
}

// step makes the following commands captures LABEL.1.txt, LABEL.2.txt, ...
// An empty label stops recording (for concurrent steps, whose order is not
// stable).
func (r *recorder) step(label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.label, r.n = label, 0
}

func (r *recorder) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return r.RunInput(ctx, nil, name, args...)
}

func (r *recorder) RunInput(ctx context.Context, input []byte, name string, args ...string) ([]byte, error) {
	r.runs.Add(1)
	out, err := r.Exec.RunInput(ctx, input, name, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir == "" || r.label == "" {
		return out, err
	}
	s := commandtest.Step{Argv: append([]string{name}, args...), Stdin: string(input), Stdout: string(out)}
	if ce := (*command.Error)(nil); errors.As(err, &ce) {
		s.ExitCode, s.Stderr = ce.ExitCode, ce.Stderr
	}
	for i := range s.Argv {
		s.Argv[i] = r.subst.Replace(s.Argv[i])
	}
	s.Stdout, s.Stderr = r.subst.Replace(s.Stdout), r.subst.Replace(s.Stderr)
	r.n++
	path := filepath.Join(r.dir, r.label+"."+strconv.Itoa(r.n)+".txt")
	if werr := os.WriteFile(path, []byte(commandtest.Format(r.note, s)), 0o644); werr != nil {
		panic(fmt.Sprintf("capture %s: %v", path, werr))
	}
	return out, err
}

// runOutDir is the lab run's out/ directory, the guest's only window to
// the host: pillar.run=DIR on the kernel command line.
func runOutDir() (string, error) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return "", err
	}
	for _, f := range strings.Fields(string(b)) {
		if dir, ok := strings.CutPrefix(f, "pillar.run="); ok {
			return filepath.Join(dir, "out"), nil
		}
	}
	return "", fmt.Errorf("no pillar.run= in /proc/cmdline")
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func toolVersions() string {
	var v []string
	if out, err := (command.Exec{}).Run(context.Background(), "zfs", "version"); err == nil {
		v = append(v, strings.Fields(string(out))[0])
	}
	if out, err := (command.Exec{}).Run(context.Background(), "lvm", "version"); err == nil {
		if f := strings.Fields(string(out)); len(f) >= 3 {
			v = append(v, "lvm "+f[2])
		}
	}
	return strings.Join(v, ", ")
}
