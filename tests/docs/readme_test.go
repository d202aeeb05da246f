package docs_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// maxReadmeLines is how long the top-level README may grow. It is the
// front door: what pillar-csi is and supports, the Quickstart, and links;
// everything else belongs in docs/.
const maxReadmeLines = 200

// TestReadmeLength fails when README.md outgrows its front door.
func TestReadmeLength(t *testing.T) {
	if n := countLines(repoFile(t, "README.md")); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page of docs/ and link it", n, maxReadmeLines)
	} else {
		t.Logf("README.md has %d lines (at most %d)", n, maxReadmeLines)
	}
}

// TestDocsIndexed fails when a page of docs/ is missing from the docs
// index (docs/README.md) or from the README's "## Documentation" section.
func TestDocsIndexed(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, idx := range []struct{ file, section string }{
		{"docs/README.md", ""},
		{"README.md", "Documentation"},
	} {
		missing, err := unindexed(root, idx.file, idx.section)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range missing {
			t.Errorf("%s does not link %s", idx.file, m)
		}
	}
}

func TestCountLines(t *testing.T) {
	for in, want := range map[string]int{
		"":           0,
		"a":          1,
		"a\n":        1,
		"a\nb":       2,
		"a\n\nb\n":   3,
		"\n\n\n":     3,
		"# T\r\nx\n": 2,
	} {
		if got := countLines(in); got != want {
			t.Errorf("countLines(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestUnindexed proves the index check on a small tree: a page that only
// another section links, or that no one links, is reported; the index
// itself and pages linked with an anchor are not.
func TestUnindexed(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) { writeFile(t, root, name, content) }
	for _, p := range []string{"a", "b", "c", "d"} {
		write("docs/"+p+".md", "# "+p+"\n")
	}
	write("docs/README.md", "# Index\n\n[a](a.md), [b](./b.md#x), [c](c.md)\n")
	write("README.md", strings.Join([]string{
		"# Top",
		"[c](docs/c.md) is linked, but not where the index is.",
		"## Documentation",
		"[index](docs/README.md), [a](docs/a.md#top), [b](/docs/b.md)",
		"```sh",
		"[d](docs/d.md) in a fence is not a link",
		"```",
		"## Next",
		"[d](docs/d.md)",
	}, "\n")+"\n")

	got, err := unindexed(root, "docs/README.md", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"docs/d.md"}; !reflect.DeepEqual(got, want) {
		t.Errorf("docs/README.md: unindexed = %v, want %v", got, want)
	}
	got, err = unindexed(root, "README.md", "Documentation")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"docs/c.md", "docs/d.md"}; !reflect.DeepEqual(got, want) {
		t.Errorf("README.md: unindexed = %v, want %v", got, want)
	}
	if _, err := unindexed(root, "README.md", "Missing"); err == nil {
		t.Error("a missing section: no error")
	}
}

// countLines counts lines as wc -l does, plus a last line without a
// newline.
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// unindexed returns, sorted, the pages docs/*.md (docs/README.md aside)
// that the Markdown file index (relative to root) does not link; with a
// section, only the links under its "## section" heading count.
func unindexed(root, index, section string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(index)))
	if err != nil {
		return nil, err
	}
	md := string(data)
	if section != "" {
		var b strings.Builder
		in, found := false, false
		lines(md, func(_ int, line string) {
			if strings.HasPrefix(line, "## ") {
				in = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == section
				found = found || in
				return
			}
			if in {
				b.WriteString(line + "\n")
			}
		})
		if !found {
			return nil, fmt.Errorf("%s has no %q section", index, "## "+section)
		}
		md = b.String()
	}
	linked := map[string]bool{}
	for _, r := range extract(md) {
		if r.code {
			continue
		}
		p, _, _ := strings.Cut(r.target, "#")
		if p == "" || strings.Contains(p, ":") {
			continue
		}
		if strings.HasPrefix(p, "/") {
			p = strings.TrimPrefix(p, "/")
		} else {
			p = path.Join(path.Dir(index), p)
		}
		linked[path.Clean(p)] = true
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range pages {
		rel := "docs/" + filepath.Base(f)
		if rel != "docs/README.md" && !linked[rel] {
			missing = append(missing, rel)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// repoFile returns the text of the repository's file rel.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
