package command_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

// rootProbeEnv makes the test binary, copied into a root filesystem and run
// there by Exec, print its working directory and /marker instead of
// running tests.
const rootProbeEnv = "PILLAR_COMMAND_ROOT_PROBE"

func init() {
	if os.Getenv(rootProbeEnv) == "" {
		return
	}
	wd, _ := os.Getwd()
	marker, err := os.ReadFile("/marker")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Printf("%s %s %s", filepath.Base(os.Args[0]), wd, marker)
	os.Exit(0)
}

// requireRoot skips where chroot is not allowed, except on CI, which runs
// the tests as root and must not lose this one quietly.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this test needs root (chroot) and CI runs as root")
	}
	t.Skip("needs root: chroot")
}

// newRoot makes a root filesystem holding this (static) test binary as
// /usr/sbin/probe, reachable as /sbin/probe through an absolute symbolic
// link, and a /marker file.
func newRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"usr/sbin", "sbin", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, self, filepath.Join(root, "usr/sbin/probe"), 0o755)
	if err := os.Symlink("/usr/sbin/probe", filepath.Join(root, "sbin/linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "marker"), []byte("host-root"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Not executable: must not be taken for a command.
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/plain"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestExecRootRunsTheRootsCommandChrooted(t *testing.T) {
	requireRoot(t)
	root := newRoot(t)
	t.Setenv(rootProbeEnv, "1")
	for _, name := range []string{"probe", "linked", "/usr/sbin/probe"} {
		out, err := command.Exec{Root: root}.Run(context.Background(), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// argv[0] is the name asked for; the working directory and /marker
		// are the root filesystem's.
		if want := filepath.Base(name) + " / host-root"; string(out) != want {
			t.Fatalf("%s printed %q, want %q", name, out, want)
		}
	}
}

func TestExecRootMissingCommandIsNotFound(t *testing.T) {
	root := newRoot(t)
	for _, name := range []string{"zfs", "plain", "/usr/bin/probe"} {
		_, err := command.Exec{Root: root}.Run(context.Background(), name, "list")
		var ce *command.Error
		if !errors.As(err, &ce) || !errors.Is(err, exec.ErrNotFound) {
			t.Fatalf("%s: error %v, want a *command.Error wrapping exec.ErrNotFound", name, err)
		}
		if !strings.Contains(err.Error(), root) || ce.ExitCode != -1 {
			t.Fatalf("%s: error %q (exit %d) should name the root %s, exit -1", name, err, ce.ExitCode, root)
		}
	}
}
