package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pillar-csi/pillar-csi/tests/chart/valuesdoc"
)

// TestCRDsCurrent: the chart installs exactly the CRDs controller-gen
// generated (hack/chart-sync.sh copies them on make generate).
func TestCRDsCurrent(t *testing.T) {
	src, err := filepath.Glob(filepath.Join(repoRoot, "api", "config", "crd", "*.yaml"))
	if err != nil || len(src) == 0 {
		t.Fatalf("no CRDs in api/config/crd: %v", err)
	}
	dst, err := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	base := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if diff := cmp.Diff(base(src), base(dst)); diff != "" {
		t.Fatalf("chart crds/ differ from api/config/crd (-want +got); run make generate:\n%s", diff)
	}
	for _, p := range src {
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir, "crds", filepath.Base(p)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("crds/%s is stale; run make generate", filepath.Base(p))
		}
	}
}

// TestReadmeCurrent: the README's values table is the one values.yaml and
// values.schema.json make.
func TestReadmeCurrent(t *testing.T) {
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(chartDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	rows, err := valuesdoc.Rows(read("values.yaml"), read("values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	readme := read("README.md")
	want, err := valuesdoc.Update(readme, valuesdoc.Table(rows))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(readme)); diff != "" {
		t.Errorf("README.md's values table is stale; run make generate (-want +got):\n%s", diff)
	}
}
