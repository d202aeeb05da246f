package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReleaseDryRun runs make release's script as a user would before a
// release: it prints every step, proves that the chart packages with the
// version and then runs the images of that tag, and changes nothing.
func TestReleaseDryRun(t *testing.T) {
	changelog := filepath.Join(repoRoot, "CHANGELOG.md")
	before, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(repoRoot, "hack", "release.sh"), args...)
		cmd.Env = append(os.Environ(), "DO=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("0.0.0-test", "registry.example:5000/pillar-csi")
	if err != nil {
		t.Fatalf("release.sh 0.0.0-test: %v\n%s", err, out)
	}
	for _, want := range []string{
		"release 0.0.0-test (dry run: DO=1 performs it)",
		"make images VERSION=0.0.0-test",
		"helm package deploy/charts/pillar-csi --version 0.0.0-test --app-version 0.0.0-test -d bin/release",
		"CHANGELOG.md: [Unreleased]",
		"make push REGISTRY=registry.example:5000/pillar-csi VERSION=0.0.0-test",
		"helm push bin/release/pillar-csi-0.0.0-test.tgz oci://registry.example:5000/pillar-csi",
		"make release-plan MODULE=api",
		"checked: pillar-csi-0.0.0-test.tgz has version and appVersion 0.0.0-test",
		"ghcr.io/pillar-csi/pillar-node:0.0.0-test",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run does not say %q:\n%s", want, out)
		}
	}
	after, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the dry run changed CHANGELOG.md")
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "bin", "release", "pillar-csi-0.0.0-test.tgz")); err == nil {
		t.Error("the dry run wrote bin/release/")
	}
	for _, bad := range []string{"v1.0.0", "1.0", ""} {
		if out, err := run(bad); err == nil || !strings.Contains(out, "want x.y.z") {
			t.Errorf("release.sh %q: %v, want a refusal naming the form:\n%s", bad, err, out)
		}
	}
}
