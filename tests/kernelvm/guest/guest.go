// Package guest tells a real-kernel test whether it runs inside the
// pillar-csi kernel lab, and stops it loudly when it does not.
//
// The lab boots its guest kernel with the parameter pillar.lab=1 on the
// kernel command line. /proc/cmdline is written by the kernel from what the
// boot loader (here QEMU's -append) passed, so a developer machine, a CI
// host or a container cannot carry the marker by accident; a test that
// checks for it cannot quietly run against the host's kernel, which has no
// nvmet, no device-mapper and no module loading, or worse, against a
// developer's real volume groups and pools.
//
// This package imports only the standard library so that any module's
// kernel-tagged tests can import it cheaply.
package guest

import (
	"bytes"
	"os"
	"testing"
)

// Marker is the kernel command-line parameter that the lab passes to its
// guest kernel.
const Marker = "pillar.lab=1"

// ModuleTreeParam is the kernel command-line parameter whose value is the
// path, as the guest sees it, of the guest kernel's whole module tree. The
// initramfs loads and carries only the modules most tests need; a guest
// that needs more (the lab cluster's networking) bind-mounts this tree over
// /lib/modules/$(uname -r).
const ModuleTreeParam = "pillar.modules"

// ArtifactsEnv names, in a lab test's environment, the directory whose
// files the host keeps after the run (pillar-lab test -artifacts DIR):
// the guest's view of the host tree is an overlay whose writes go with
// the guest.
const ArtifactsEnv = "PILLAR_LAB_ARTIFACTS"

// Param returns the value of the kernel command-line parameter name=value
// the lab passed, and whether it is there.
func Param(name string) (string, bool) {
	b, err := os.ReadFile(cmdlinePath)
	if err != nil {
		return "", false
	}
	for _, f := range bytes.Fields(b) {
		if k, v, ok := bytes.Cut(f, []byte("=")); ok && string(k) == name {
			return string(v), true
		}
	}
	return "", false
}

// cmdlinePath is where the running kernel publishes its command line.
const cmdlinePath = "/proc/cmdline"

// InLab reports whether this process runs inside the kernel lab's guest.
func InLab() bool {
	ok, _ := inLab(cmdlinePath)
	return ok
}

func inLab(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	for _, f := range bytes.Fields(b) {
		if string(f) == Marker {
			return true, nil
		}
	}
	return false, nil
}

// RequireGuest stops the test with t.Fatal unless it runs inside the kernel
// lab's guest. Every kernel-tagged test calls it first: a real-kernel test
// that cannot run where it is asked to must fail, not skip, or a CI run
// that lost its VM would report green.
func RequireGuest(t testing.TB) {
	t.Helper()
	requireGuest(t, cmdlinePath)
}

func requireGuest(t testing.TB, path string) {
	t.Helper()
	ok, err := inLab(path)
	if err != nil {
		t.Fatalf("real-kernel test: run it with make test-kernel (cannot read %s: %v)", path, err)
	}
	if !ok {
		t.Fatalf("real-kernel test: run it with make test-kernel (%s lacks %s: this is not the kernel lab's guest)", path, Marker)
	}
}
