package chart

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestSidecarFlagsKnown: every flag the chart passes to a sidecar (and to
// the snapshot controller) is defined by the version of it that the images
// are built from: a sidecar exits at once on a flag it does not know, and
// a renamed flag would otherwise be found only in a cluster.
func TestSidecarFlagsKnown(t *testing.T) {
	r := render(t, release{name: "pillar-csi", namespace: "pillar-csi", apiVersions: []string{snapshotsServed},
		values: map[string]any{"snapshots": map[string]any{"controller": map[string]any{"enabled": true}}}})
	// container: tests/tools/sidecars/<tool>, the module, its command.
	sources := map[string]struct{ tool, module, cmd string }{
		"csi-provisioner":     {"sidecars/provisioner", "github.com/kubernetes-csi/external-provisioner/v6", "cmd/csi-provisioner"},
		"csi-attacher":        {"sidecars/attacher", "github.com/kubernetes-csi/external-attacher/v4", "cmd/csi-attacher"},
		"csi-resizer":         {"sidecars/resizer", "github.com/kubernetes-csi/external-resizer/v2", "cmd/csi-resizer"},
		"csi-snapshotter":     {"sidecars/snapshotter", "github.com/kubernetes-csi/external-snapshotter/v8", "cmd/csi-snapshotter"},
		"snapshot-controller": {"sidecars/snapshotter", "github.com/kubernetes-csi/external-snapshotter/v8", "cmd/snapshot-controller"},
	}
	seen := map[string]bool{}
	for _, o := range r.find("Deployment") {
		d := get[appsv1.Deployment](t, r, "Deployment", o.GetName())
		for _, c := range d.Spec.Template.Spec.Containers {
			src, ok := sources[c.Name]
			if !ok {
				continue
			}
			seen[c.Name] = true
			defined := sidecarFlags(t, src.tool, src.module, src.cmd)
			for _, a := range c.Args {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if !strings.HasPrefix(a, "-") || defined[name] {
					continue
				}
				t.Errorf("%s: the chart passes %s, which %s/%s does not define", c.Name, a, src.module, src.cmd)
			}
		}
	}
	for name := range sources {
		if !seen[name] {
			t.Errorf("no container %s rendered: the test checks nothing for it", name)
		}
	}
}

// flagDef matches a flag definition of the standard flag package or pflag
// by its name: flag.Int("worker-threads", ...), fs.DurationVar(&x,
// "timeout", ...).
var flagDef = regexp.MustCompile(`\.(?:Bool|Int|Int64|Uint|Uint64|Float32|Float64|String|Duration|StringSlice|Var)(?:Var|VarP|P)?\((?:&[\w.]+,\s*)?"([\w-]+)"`)

// sidecarFlags returns the flags that the command cmd of module (at the
// version tests/tools/<tool> pins) and the csi-lib-utils it is built with
// define, read from their sources. klog's flags (-v) are added.
func sidecarFlags(t *testing.T, tool, module, cmd string) map[string]bool {
	t.Helper()
	flags := map[string]bool{"v": true}
	dir, _, err := moduleDir(tool, module)
	if err != nil {
		t.Fatal(err)
	}
	utils, _, err := moduleDir(tool, "github.com/kubernetes-csi/csi-lib-utils")
	if err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{filepath.Join(dir, filepath.FromSlash(cmd)), filepath.Join(utils, "standardflags"), filepath.Join(utils, "leaderelection")} {
		err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range flagDef.FindAllSubmatch(src, -1) {
				flags[string(m[1])] = true
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return flags
}
