package valuesdoc

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const schema = `{"type":"object","properties":{
  "a":{"type":"object","properties":{"b":{"type":"integer"},"sel":{"type":"object"}}},
  "mode":{"type":"string","enum":["x","y"]}}}`

func TestRows(t *testing.T) {
	values := `# File header.

a:
  # The b.
  # Two lines.
  b: 1
  # A map that is one value.
  sel:
    k: "v|w"
# One of x or y.
mode: x
`
	rows, err := Rows([]byte(values), []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Key: "a.b", Type: "integer", Default: "1", Description: "The b. Two lines."},
		{Key: "a.sel", Type: "object", Default: `{"k":"v|w"}`, Description: "A map that is one value."},
		{Key: "mode", Type: `x \| y`, Default: `"x"`, Description: "One of x or y."},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if table := Table(rows); !strings.Contains(table, "`{\"k\":\"v\\|w\"}`") {
		t.Errorf("pipe not escaped:\n%s", table)
	}
}

func TestRowsRefuseUndocumented(t *testing.T) {
	for name, values := range map[string]string{
		"no comment":     "a:\n  b: 1\n",
		"not in schema":  "# Doc.\nz: 1\n",
		"nested unknown": "a:\n  # Doc.\n  c: 1\n",
	} {
		if _, err := Rows([]byte(values), []byte(schema)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestUpdate(t *testing.T) {
	got, err := Update([]byte("intro\n"+BeginMarker+"\nold\n"+EndMarker+"\nend\n"), "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + BeginMarker + "\nnew\n" + EndMarker + "\nend\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := Update([]byte("no markers"), "x"); err == nil {
		t.Error("README without markers accepted")
	}
}
