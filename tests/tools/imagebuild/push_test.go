package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

// builtImages writes what build leaves in -out for every image of the
// chart (<name>.oci/ and <name>.json), with random content, and returns
// the digests.
func builtImages(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	digests := map[string]string{}
	for _, n := range chartNames() {
		img, err := random.Image(512, 1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := layout.Write(filepath.Join(dir, n+".oci"), empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		tag := "0.1.0"
		if strings.HasPrefix(n, "csi-") {
			tag = "v1.2.3"
		}
		raw, _ := json.Marshal(Result{Reference: "ghcr.io/pillar-csi/" + n + ":" + tag, Digest: d.String()})
		if err := os.WriteFile(filepath.Join(dir, n+".json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		digests[n] = d.String()
	}
	return dir, digests
}

// TestPushByDigest pushes every image of the chart to a registry served in
// the test (go-containerregistry's), reads each back by digest, and renders
// the chart with the values file push wrote: every container names exactly
// what was pushed.
func TestPushByDigest(t *testing.T) {
	images, built := builtImages(t)
	srv := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "https://") + "/team/pillar-csi"
	values := filepath.Join(t.TempDir(), "values.yaml")
	got, err := push(context.Background(), pushOptions{
		Images: images, Registry: reg, Values: values, Timeout: time.Minute, Transport: srv.Client().Transport,
	}, chartNames())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(chartValues) {
		t.Fatalf("pushed %d images, want %d", len(got), len(chartValues))
	}
	want := map[string]string{} // image reference -> digest
	for _, p := range got {
		if p.Digest != built[p.Name] {
			t.Errorf("%s: pushed %s, built %s", p.Name, p.Digest, built[p.Name])
		}
		// The registry serves the built digest under the tag too.
		tag, err := name.NewTag(p.Repository + ":" + p.Tag)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Head(tag, remote.WithTransport(srv.Client().Transport))
		if err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		if desc.Digest.String() != built[p.Name] {
			t.Errorf("%s serves %s, built %s", tag, desc.Digest, built[p.Name])
		}
		want[reg+"/"+p.Name+"@"+built[p.Name]] = p.Name
	}

	raw, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatalf("values file: %v\n%s", err, raw)
	}
	img := v["controller"].(map[string]any)["provisioner"].(map[string]any)["image"].(map[string]any)
	if img["repository"] != reg+"/csi-provisioner" || img["tag"] != "v1.2.3" || img["digest"] != built["csi-provisioner"] {
		t.Errorf("controller.provisioner.image = %v", img)
	}

	// The chart itself, with that file: every image it runs is one pushed.
	helm := filepath.Join("..", "..", "..", "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("rendering the chart needs bin/helm (make test builds it): %v", err)
	}
	out, err := exec.Command(helm, "template", "x", filepath.Join("..", "..", "..", "deploy", "charts", "pillar-csi"),
		"-f", values, "--kube-version", "1.30.0", "--set", "storageNodes[0].name=s1,storageNodes[0].address=192.0.2.1",
		// Every image: the snapshot sidecar and the snapshot controller run
		// where the cluster serves the snapshot API, and when asked.
		"--api-versions", "snapshot.storage.k8s.io/v1/VolumeSnapshotClass", "--set", "snapshots.controller.enabled=true").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	rendered := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+image: "?([^"\s]+)"?$`).FindAllStringSubmatch(string(out), -1) {
		rendered[m[1]] = true
	}
	for ref := range rendered {
		if _, ok := want[ref]; !ok {
			t.Errorf("the chart runs %s, which was not pushed", ref)
		}
	}
	for ref, n := range want {
		if !rendered[ref] {
			t.Errorf("the chart does not run %s (%s)", ref, n)
		}
	}
}

// TestPushRefuses: what would push the wrong thing, or push it where the
// user did not mean, fails before or instead of pushing.
func TestPushRefuses(t *testing.T) {
	images, built := builtImages(t)
	plain := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer plain.Close()
	host := strings.TrimPrefix(plain.URL, "http://")
	for _, c := range []struct {
		name, registry string
		names          []string
		insecure       bool
		tamper         bool
		want           string
	}{
		{name: "a scheme", registry: "https://" + host, names: []string{"pillar-node"}, want: "want host[:port][/path]"},
		{name: "a tag", registry: host + "/x:1", names: []string{"pillar-node"}, want: "want host[:port][/path]"},
		{name: "an image not in the chart", registry: host, names: []string{"pause"}, want: "not an image of the chart"},
		{name: "plain HTTP not asked for", registry: host, names: []string{"pillar-node"}, want: "does not answer over HTTPS"},
		{name: "a layout that is not what was built", registry: host, names: []string{"pillar-agent"}, insecure: true, tamper: true, want: "build the images again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := images
			if c.tamper {
				// The layout of one build, the summary of another.
				dir = t.TempDir()
				if err := os.CopyFS(filepath.Join(dir, "pillar-agent.oci"), os.DirFS(filepath.Join(images, "pillar-agent.oci"))); err != nil {
					t.Fatal(err)
				}
				raw, _ := json.Marshal(Result{Reference: "ghcr.io/pillar-csi/pillar-agent:0.1.0", Digest: built["pillar-node"]})
				if err := os.WriteFile(filepath.Join(dir, "pillar-agent.json"), raw, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := push(context.Background(), pushOptions{Images: dir, Registry: c.registry, Insecure: c.insecure, Timeout: time.Minute}, slices.Clone(c.names))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("push: %v, want an error saying %q", err, c.want)
			}
		})
	}
	// The same registry, asked for: the push goes through.
	if _, err := push(context.Background(), pushOptions{Images: images, Registry: host, Insecure: true, Timeout: time.Minute}, []string{"pillar-node"}); err != nil {
		t.Fatalf("push -insecure to a plain HTTP registry: %v", err)
	}
}
