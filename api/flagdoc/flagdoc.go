// Package flagdoc renders the flags of a pillar-csi binary as the
// Markdown reference of docs/reference, and keeps that file fresh: each
// binary has a test that renders its flag set and compares it with the
// file, and `make generate` rewrites the file through the same test
// (UpdateEnv set). The flag set is the source of truth, so the reference
// cannot drift from -h.
//
// It lives in the api module, which every binary's module requires, and
// needs only the standard library.
package flagdoc

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// UpdateEnv, set to 1, makes Check write the reference instead of
// comparing it.
const UpdateEnv = "PILLAR_UPDATE_REFERENCE"

// Markdown renders fs's flags, sorted by name, under a title naming the
// binary and with intro as the first paragraph.
func Markdown(binary, intro string, fs *flag.FlagSet) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s flags\n\n<!-- Generated from %s's flag set by `make generate`; do not edit. -->\n\n%s\n\n",
		binary, binary, strings.TrimSpace(intro))
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		name := "-" + f.Name
		if arg != "" {
			name += " " + arg
		}
		def := "`" + f.DefValue + "`"
		if f.DefValue == "" {
			def = "none"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, def, cell(usage))
	})
	return b.Bytes()
}

// Check compares got with the reference at path and fails t when they
// differ, naming the command that refreshes it; with UpdateEnv=1 in the
// environment it writes got to path instead.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if os.Getenv(UpdateEnv) == "1" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run make generate", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: the flags changed; run make generate", path)
	}
}

// cell is s on one line with the table's separator escaped.
func cell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}
