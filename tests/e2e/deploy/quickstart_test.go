package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The quickstart the end-to-end suite runs is the README's: both parts
// have commands, the replacements the lab makes still match, and every
// file a command applies exists.
func TestQuickstartOfTheREADME(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, part := range []string{QuickstartInstall, QuickstartVolume} {
		repl := []string{}
		if part == QuickstartInstall {
			repl = installReplacements("lab-node", registryInfo{}, "/tmp/values.yaml")
		}
		s, err := QuickstartScript(root, part, repl...)
		if err != nil {
			t.Fatal(err)
		}
		checkFiles(t, root, part, s)
	}
	// With the lab registry: the push goes there, with its CA, the chart
	// is packaged, pushed and installed from there, with the values the
	// push wrote.
	s, err := QuickstartScript(root, QuickstartInstall,
		installReplacements("lab-node", registryInfo{repository: "192.0.2.1:5000/pillar-csi", ca: "/run/ca.crt"}, "/tmp/values.yaml")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"SSL_CERT_FILE=/run/ca.crt bin/imagebuild push -images bin/images -registry 192.0.2.1:5000/pillar-csi -values bin/push-values.yaml",
		"helm package deploy/charts/pillar-csi --version 0.0.0-lab -d bin/lab-chart && " +
			"helm push bin/lab-chart/pillar-csi-0.0.0-lab.tgz oci://192.0.2.1:5000/pillar-csi --ca-file /run/ca.crt && " +
			"helm install pillar-csi oci://192.0.2.1:5000/pillar-csi/pillar-csi --version 0.0.0-lab --ca-file /run/ca.crt -f /tmp/values.yaml -f bin/push-values.yaml",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the lab's install does not run %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "make push") {
		t.Errorf("the lab's install runs make push, which would build the images in the guest:\n%s", s)
	}
	rec, err := RecoveryBlocks(root, recoveryReplacements("pvc-x", "pv-x")...)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(rec, "\n"); !strings.Contains(s, "kubectl patch pillarvolumestate pvc-x") {
		t.Errorf("the recovery procedure patches no volume:\n%s", s)
	}
}

// checkFiles fails when script applies no file or one that does not exist.
func checkFiles(t *testing.T, root, part, s string) {
	t.Helper()
	files := regexp.MustCompile(`-f (\S+)`).FindAllStringSubmatch(s, -1)
	if len(files) == 0 {
		t.Errorf("the quickstart's %q applies no file:\n%s", part, s)
	}
	for _, m := range files {
		if strings.HasPrefix(m[1], "/tmp/") || strings.HasPrefix(m[1], "bin/") {
			continue // the lab's, or written by make
		}
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("the quickstart's %q: %v", part, err)
		}
	}
}

func TestQuickstartBlocks(t *testing.T) {
	md := "# T\n```sh\nnot me\n```\n## Quickstart\ntext\n### Install\n```sh\none\n```\n```text\n## not a heading\n```\n```sh\ntwo\n```\n### A volume\n```sh\nthree\n```\n## Next\n### Install\n```sh\nfour\n```\n"
	path := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := QuickstartScript(filepath.Dir(path), QuickstartInstall, "two", "2")
	if err != nil {
		t.Fatal(err)
	}
	if want := "one\n\n2\n"; got != want {
		t.Errorf("install part = %q, want %q", got, want)
	}
	if got, err := QuickstartScript(filepath.Dir(path), QuickstartVolume); err != nil || got != "three\n" {
		t.Errorf("volume part = %q, %v; want %q", got, err, "three\n")
	}
	if _, err := QuickstartScript(filepath.Dir(path), QuickstartInstall, "absent", "x"); err == nil || !strings.Contains(err.Error(), "no longer says") {
		t.Errorf("a replacement that matches nothing: %v, want an error", err)
	}
	if _, err := QuickstartScript(filepath.Dir(path), "Missing"); err == nil {
		t.Error("a part without blocks: no error")
	}
	indented := "## Quickstart\n### Install\n1. Run:\n\n   ```sh\n   kubectl get pv\n     --indented\n   ```\n"
	if err := os.WriteFile(path, []byte(indented), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := QuickstartScript(filepath.Dir(path), QuickstartInstall); err != nil || got != "kubectl get pv\n  --indented\n" {
		t.Errorf("an indented block = %q, %v", got, err)
	}
	if err := os.WriteFile(path, []byte("## Quickstart\n### Install\n```sh\nopen\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := QuickstartScript(filepath.Dir(path), QuickstartInstall); err == nil {
		t.Error("an unterminated block: no error")
	}
}

func TestListedChart(t *testing.T) {
	got, err := listedChart([]byte(`[{"name":"pillar-csi","namespace":"pillar-csi","chart":"pillar-csi-0.0.0-lab","app_version":"0.1.0"}]`))
	if err != nil || got != "pillar-csi-0.0.0-lab" {
		t.Errorf("listedChart = %q, %v", got, err)
	}
	for _, bad := range []string{`[]`, `[{"chart":"a"},{"chart":"b"}]`, `{`} {
		if _, err := listedChart([]byte(bad)); err == nil {
			t.Errorf("listedChart accepted %s", bad)
		}
	}
}
