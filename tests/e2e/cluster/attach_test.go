package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The state a kept cluster writes is all an attaching test binary gets:
// what it rebuilds must be what the methods the tests call read.
func TestAttachStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	orig := &Cluster{
		opts:       Options{BinDir: "/repo/bin", ImageDir: "/repo/bin/images", StateDir: dir},
		NodeName:   "pillar-lab",
		NodeIP:     "10.77.0.2",
		Kubeconfig: kc,
		PauseImage: "registry.k8s.io/pause:3.10",
		Registry:   "10.0.0.1:5000", RegistryCA: "/s/pki/ca.crt",
		Images: []string{"a:1", "b:2"},

		busyboxApplets: []string{"sh", "nc"},
	}
	path := filepath.Join(dir, "attach.json")
	if err := orig.WriteAttachState(path); err != nil {
		t.Fatal(err)
	}
	c, err := Attach(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.AttachState(), orig.AttachState(); !equalState(got, want) {
		t.Errorf("attached cluster's state\n got %+v\nwant %+v", got, want)
	}
	if !c.Attached() || orig.Attached() {
		t.Errorf("Attached() = %v for the attached cluster, %v for the started one", c.Attached(), orig.Attached())
	}
	if c.bin("kubectl") != "/repo/bin/kubectl" || c.dir("images") != filepath.Join(dir, "images") {
		t.Errorf("attached cluster finds kubectl at %s and its images at %s", c.bin("kubectl"), c.dir("images"))
	}
	// The owner tears down; an attached test binary must not, even on
	// failure, or the next make e2e-run finds no cluster.
	ran := false
	c.onStop("would tear down", func() error { ran = true; return nil })
	if err := c.Stop(); err != nil || ran {
		t.Errorf("Stop of an attached cluster: err %v, teardown ran %v; want neither", err, ran)
	}
	if err := c.StopKubelet(); !errors.Is(err, ErrAttached) {
		t.Errorf("StopKubelet of an attached cluster: %v, want ErrAttached", err)
	}
}

func TestAttachRejects(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"not json":      "{",
		"no kubeconfig": `{"nodeName":"n","nodeIP":"10.0.0.1","binDir":"/b","stateDir":"/s"}`,
		"no node":       `{"kubeconfig":"/k","binDir":"/b","stateDir":"/s"}`,
		"gone kubeconfig": `{"kubeconfig":"` + filepath.Join(dir, "nothing") +
			`","nodeName":"n","nodeIP":"10.0.0.1","binDir":"/b","stateDir":"/s"}`,
	} {
		p := filepath.Join(dir, "state.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Attach(p, nil); err == nil {
			t.Errorf("%s: Attach succeeded", name)
		}
	}
	if _, err := Attach(filepath.Join(dir, "missing.json"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing state file: %v, want ErrNotExist", err)
	}
}

func equalState(a, b AttachState) bool {
	return a.NodeName == b.NodeName && a.NodeIP == b.NodeIP && a.PeerName == b.PeerName && a.PeerIP == b.PeerIP &&
		a.Kubeconfig == b.Kubeconfig && a.BinDir == b.BinDir && a.ImageDir == b.ImageDir && a.StateDir == b.StateDir &&
		a.PauseImage == b.PauseImage && slices.Equal(a.Images, b.Images) && slices.Equal(a.BusyboxApplets, b.BusyboxApplets) &&
		a.Registry == b.Registry && a.RegistryCA == b.RegistryCA
}
