package v1alpha1_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// examplesDir holds the sample manifests the README shows. They live in the
// repository's deploy/ tree, outside this module, so this test runs from a
// repository checkout.
var examplesDir = filepath.Join("..", "..", "deploy", "examples")

func readExamples(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no sample manifests in %s: run the tests from a repository checkout", examplesDir)
	}
	out := map[string][]*unstructured.Unstructured{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], &u)
		}
	}
	return out
}

// Every sample manifest the README shows is accepted by the API server with
// strict field validation: no unknown or misspelled field, no rule broken.
func TestExamplesAreAccepted(t *testing.T) {
	c := ctx(t)
	kinds := map[string]bool{}
	for file, objs := range readExamples(t) {
		for _, u := range objs {
			mapping, err := k8s.RESTMapper().RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
			if err != nil {
				t.Errorf("%s: %s: %v", file, u.GetKind(), err)
				continue
			}
			if mapping.Scope.Name() == meta.RESTScopeNameNamespace && u.GetNamespace() == "" {
				u.SetNamespace("default")
			}
			if err := k8s.Create(c, u, strict); err != nil {
				t.Errorf("%s: %s %s refused: %v", file, u.GetKind(), u.GetName(), err)
				continue
			}
			kinds[u.GetKind()] = true
		}
	}
	for _, k := range []string{"PillarAgent", "PillarStore", "PillarProtocol", "PillarStorageClass"} {
		if !kinds[k] {
			t.Errorf("no accepted sample of kind %s in %s", k, examplesDir)
		}
	}
}

// The README's recovery procedure for ExportSpecMissing: the operator states
// the export with a merge patch, and the API server accepts it on a volume
// that has none. Leaving a field out is refused: nothing is guessed.
func TestExportSpecRecoveryPatch(t *testing.T) {
	c := ctx(t)
	patch, err := os.ReadFile(filepath.Join(examplesDir, "recovery", "export-spec-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	patchJSON, err := yaml.ToJSON(patch)
	if err != nil {
		t.Fatal(err)
	}

	legacy := volumeState("pvc-legacy")
	legacy.Spec.Export, legacy.Spec.ProtocolName, legacy.Spec.Publications = nil, "", nil
	if err := k8s.Create(c, legacy, strict); err != nil {
		t.Fatal(err)
	}

	incomplete := []byte(`{"spec":{"export":{"bindAddress":"192.0.2.10","port":4420}}}`)
	err = k8s.Patch(c, legacy, client.RawPatch(types.MergePatchType, incomplete), strict)
	if err == nil || !strings.Contains(err.Error(), "spec.export.aclEnabled: Required value") {
		t.Fatalf("patch without aclEnabled: got %v, want refused with spec.export.aclEnabled: Required value", err)
	}

	if err := k8s.Patch(c, legacy, client.RawPatch(types.MergePatchType, patchJSON), strict); err != nil {
		t.Fatalf("recovery patch refused: %v", err)
	}
	want := &v1alpha1.ExportSpec{BindAddress: "192.0.2.10", Port: 4420, ACLEnabled: ptr.To(true)}
	got := legacy.Spec.Export
	if got == nil || got.BindAddress != want.BindAddress || got.Port != want.Port || got.ACLEnabled == nil || *got.ACLEnabled != *want.ACLEnabled || got.SubsystemNQN != "" {
		t.Fatalf("export after recovery = %+v, want %+v", got, want)
	}
}

// The examples directory documents every file it holds.
func TestExamplesAreListedInTheirREADME(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(examplesDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, pattern := range []string{"*.yaml", "*/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(examplesDir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	for _, f := range files {
		rel, _ := filepath.Rel(examplesDir, f)
		if !bytes.Contains(readme, []byte("`"+filepath.ToSlash(rel)+"`")) {
			t.Errorf("%s is not listed in %s/README.md", rel, examplesDir)
		}
	}
}
