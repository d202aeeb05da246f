package guest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The host sees a request once it is whole, and not again once answered.
func TestPowerCutRequests(t *testing.T) {
	dir := t.TempDir()
	check := func(want ...int) {
		t.Helper()
		got, err := PowerCutRequests(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("requests %v, want %v", got, want)
		}
	}
	check()
	// A request being written (WriteFileAtomic's temporary) and
	// unrelated files are not requests.
	for _, f := range []string{".power-cut.1.tmp", "join", "power-cut.x", "power-cut.2.bak"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check()
	if err := WriteFileAtomic(filepath.Join(dir, powerCutFile(1)), []byte("cut\n")); err != nil {
		t.Fatal(err)
	}
	check(1)
	if err := AnswerPowerCut(dir, 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	check()
	if err := WriteFileAtomic(filepath.Join(dir, powerCutFile(2)), []byte("cut\n")); err != nil {
		t.Fatal(err)
	}
	check(2)
}

func TestWriteFileAtomicLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFileAtomic(p, []byte("x")); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "f" {
		t.Fatalf("directory holds %v, want only f", ents)
	}
	if b, _ := os.ReadFile(p); string(b) != "x" {
		t.Fatalf("f holds %q", b)
	}
}
