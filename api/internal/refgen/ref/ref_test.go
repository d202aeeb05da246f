package ref

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReasons(t *testing.T) {
	var b strings.Builder
	if err := Reasons(&b, filepath.Join("..", "..", "..", "v1alpha1", "reasons.go")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Ready reasons of PillarAgent",
		"| `AgentReady` | with the condition | the agent answers",
		"| `FencingRefused` | Warning | the agent refused a call as stale",
		"| `ExportsPushed` | Normal |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
}

func TestReasonsRefusesUndocumented(t *testing.T) {
	for name, src := range map[string]string{
		"no comment":        "package p\n\n// Reasons of X.\nconst (\n\tReasonA = \"A\"\n)\n",
		"wrong name":        "package p\n\n// Reasons of X.\nconst (\n\t// ReasonB: b.\n\tReasonA = \"A\"\n)\n",
		"untitled block":    "package p\n\nconst (\n\t// ReasonA: a.\n\tReasonA = \"A\"\n)\n",
		"not a string":      "package p\n\n// Reasons of X.\nconst (\n\t// ReasonA: a.\n\tReasonA = 1\n)\n",
		"no reasons at all": "package p\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "r.go")
			if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := Reasons(&strings.Builder{}, f); err == nil {
				t.Errorf("Reasons accepted %q", src)
			}
		})
	}
}

func TestCRDs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "config", "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("CRD manifests: %v %v", files, err)
	}
	var b strings.Builder
	if err := CRDs(&b, files); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"## PillarVolumeState",
		"`pillarstores.pillar-csi.io`, version `v1alpha1`, cluster-scoped",
		"| `spec.port` | integer (int32) |",
		"Default: `9420`.",
		"| `status.conditions` | array of Condition |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	if strings.Contains(out, "status.conditions[].reason") {
		t.Error("the reference repeats the fields of metav1.Condition")
	}
	if err := CRDs(&b, nil); err == nil {
		t.Error("CRDs accepted no manifests")
	}
}
