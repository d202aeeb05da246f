// Package phases tests hack/phases.sh, the phase runner of make check, in
// the shell that runs it (bash with set -euo pipefail).
package phases

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runScript runs body after sourcing hack/phases.sh as hack/check.sh does,
// and returns its output.
func runScript(t *testing.T, body string) (string, error) {
	t.Helper()
	lib, err := filepath.Abs(filepath.Join("..", "..", "hack", "phases.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", "set -euo pipefail\nsource "+lib+"\n"+body)
	cmd.Env = append(cmd.Environ(), "PHASE_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAwaitPhaseBeforeItBegins waits for a phase that a background phase
// starts only later: the record is not there at the first look, which
// once ended make check with exit 2 under set -e.
func TestAwaitPhaseBeforeItBegins(t *testing.T) {
	out, err := runScript(t, `
host() { sleep 1; run_phase build-cluster 10 true; }
start_phase host 10 host
rec=$(phase_rec build-cluster)
echo "first look: [$rec]"
await_phase build-cluster
phase_ok build-cluster && echo "build-cluster ok"
wait_phase host >/dev/null
echo done
`)
	if err != nil {
		t.Fatalf("the script failed: %v\n%s", err, out)
	}
	for _, want := range []string{"first look: []", "build-cluster ok", "done"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPhaseRecNames tells kernel-lab from build-kernel-lab.
func TestPhaseRecNames(t *testing.T) {
	out, err := runScript(t, `
run_phase build-kernel-lab 10 true >/dev/null
echo "kernel-lab: [$(phase_rec kernel-lab)]"
phase_ok kernel-lab || echo "kernel-lab not run"
phase_ok build-kernel-lab && echo "build-kernel-lab ok"
`)
	if err != nil {
		t.Fatalf("the script failed: %v\n%s", err, out)
	}
	for _, want := range []string{"kernel-lab: []", "kernel-lab not run", "build-kernel-lab ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
