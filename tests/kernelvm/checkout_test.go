package kernelvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// LabHostTestsEnv, set to 1, runs the tests of this package that boot the
// real lab from the host (make test-kernel sets it). They need root and
// take a VM boot each, so plain go test leaves them out and says so.
const LabHostTestsEnv = "PILLAR_LAB_HOST_TESTS"

func requireLabHost(t *testing.T) {
	t.Helper()
	if os.Getenv(LabHostTestsEnv) != "1" {
		t.Skipf("boots the kernel lab: run by make test-kernel (%s=1)", LabHostTestsEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 but not root: the kernel lab needs root", LabHostTestsEnv)
	}
}

// TestCheckoutUnderTmp runs pillar-lab test from a workspace under /tmp,
// where the guest mounts a tmpfs of its own, and has the guest read a file
// of the workspace's bin/ (what the controller and images suites read:
// etcd, kube-apiserver, the images' root filesystems). A clone under /tmp
// once failed every such test with "no such file or directory", because
// only the module directories were made visible again.
func TestCheckoutUnderTmp(t *testing.T) {
	requireLabHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	lab := filepath.Join(t.TempDir(), "pillar-lab")
	build := exec.CommandContext(ctx, "go", "build", "-o", lab, "../cmd/pillar-lab")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build pillar-lab: %v\n%s", err, out)
	}

	// Under /tmp whatever TMPDIR says: that is the case under test.
	root, err := os.MkdirTemp("/tmp", "pillar-lab-checkout-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	marker := fmt.Sprintf("bin file of %s", filepath.Base(root))
	files := map[string]string{
		"go.work":        "go 1.26.0\n\nuse ./probe\n",
		"probe/go.mod":   "module example.com/probe\n\ngo 1.26.0\n",
		"bin/marker.txt": marker,
		"probe/doc.go":   "package probe\n",
		"probe/bin_test.go": `//go:build kernel

package probe

import (
	"os"
	"testing"
)

func TestReadsBin(t *testing.T) {
	b, err := os.ReadFile("../bin/marker.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != ` + fmt.Sprintf("%q", marker) + ` {
		t.Fatalf("bin/marker.txt holds %q", b)
	}
}
`,
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.CommandContext(ctx, lab, "test", "-timeout", "10m", "./probe")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=")
	out, err := cmd.CombinedOutput()
	t.Logf("pillar-lab test in %s:\n%s", root, out)
	if err != nil {
		t.Fatalf("pillar-lab test from a checkout under /tmp: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestReadsBin") || !strings.Contains(string(out), "kernel-lab: 1 passed, 0 failed") {
		t.Fatal("the guest did not read the checkout's bin/ (see the output above)")
	}
}
