package chart

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// TestHostNQNScript runs the node's host-nqn init container script with the
// host's /bin/sh (dash on Debian, as in the node image) against a scratch
// directory instead of /etc/nvme and a stand-in for nvme gen-hostnqn: it
// creates missing files, derives the host ID from the NQN's UUID, and never
// replaces files that are there.
func TestHostNQNScript(t *testing.T) {
	r := render(t, release{name: "pillar-csi", namespace: "pillar-csi"})
	ds := get[appsv1.DaemonSet](t, r, "DaemonSet", "pillar-csi-node")
	script := container(t, ds.Spec.Template.Spec.InitContainers, "host-nqn").Command[2]

	const nqn = "nqn.2014-08.org.nvmexpress:uuid:0b5f3b0c-9d1e-4b0a-8f43-5f1d2c7e9a11"
	// fakeNVMe is a stand-in for nvme whose gen-hostnqn prints gen.
	fakeNVMe := func(t *testing.T, gen string) string {
		t.Helper()
		bin := t.TempDir()
		fake := "#!/bin/sh\n[ \"$1\" = gen-hostnqn ] || exit 2\necho " + gen + "\n"
		if err := os.WriteFile(filepath.Join(bin, "nvme"), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
		return bin
	}
	bin := fakeNVMe(t, nqn)
	runWith := func(t *testing.T, dir, bin string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-ec", strings.ReplaceAll(script, "/etc/nvme/", dir+"/"))
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("script: %v\n%s", err, out)
		}
	}
	run := func(t *testing.T, dir string) { t.Helper(); runWith(t, dir, bin) }
	read := func(t *testing.T, p string) string {
		t.Helper()
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}

	write := func(t *testing.T, p, data string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("creates both", func(t *testing.T) {
		dir := t.TempDir()
		run(t, dir)
		if got := read(t, filepath.Join(dir, "hostnqn")); got != nqn+"\n" {
			t.Errorf("hostnqn %q", got)
		}
		if got := read(t, filepath.Join(dir, "hostid")); got != "0b5f3b0c-9d1e-4b0a-8f43-5f1d2c7e9a11\n" {
			t.Errorf("hostid %q, want the NQN's UUID", got)
		}
	})
	t.Run("keeps existing files", func(t *testing.T) {
		dir := t.TempDir()
		const own, id = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555\n", "99999999-8888-7777-6666-555555555555\n"
		write(t, filepath.Join(dir, "hostnqn"), own)
		write(t, filepath.Join(dir, "hostid"), id)
		run(t, dir)
		if got := read(t, filepath.Join(dir, "hostnqn")); got != own {
			t.Errorf("hostnqn replaced: %q", got)
		}
		if got := read(t, filepath.Join(dir, "hostid")); got != id {
			t.Errorf("hostid replaced: %q", got)
		}
	})
	t.Run("random host ID for an NQN without UUID", func(t *testing.T) {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "hostnqn"), "nqn.2020-01.example:host-1\n")
		run(t, dir)
		id := read(t, filepath.Join(dir, "hostid"))
		if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$`).MatchString(id) {
			t.Errorf("hostid %q is not a UUID", id)
		}
	})
	t.Run("random UUID when nvme derives the all-zero one", func(t *testing.T) {
		dir := t.TempDir()
		runWith(t, dir, fakeNVMe(t, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000000"))
		got := read(t, filepath.Join(dir, "hostnqn"))
		if !regexp.MustCompile(`^nqn\.2014-08\.org\.nvmexpress:uuid:[0-9a-f-]{36}\n$`).MatchString(got) || strings.Contains(got, "00000000-0000") {
			t.Errorf("hostnqn %q, want a random UUID NQN", got)
		}
		if id := read(t, filepath.Join(dir, "hostid")); !strings.Contains(got, strings.TrimSpace(id)) {
			t.Errorf("hostid %q is not the NQN's UUID (%q)", id, got)
		}
	})
}
