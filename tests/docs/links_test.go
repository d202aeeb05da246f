package docs_test

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// checkedFiles are the Markdown files an operator reads; every relative
// link and file reference in them must resolve. Globs are relative to the
// repository root.
var checkedFiles = []string{
	"README.md",
	"CONTRIBUTING.md",
	"docs/*.md",
	"deploy/examples/README.md",
	"deploy/charts/pillar-csi/README.md",
	"tests/README.md",
}

// TestDocLinks resolves every relative link, anchor and file reference in
// checkedFiles against the working tree.
func TestDocLinks(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, g := range checkedFiles {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(g)))
		if err != nil {
			t.Fatalf("glob %s: %v", g, err)
		}
		if len(m) == 0 {
			// A listed file that vanished is itself a broken reference.
			t.Errorf("%s matches no file", g)
		}
		files = append(files, m...)
	}
	c := newChecker(root)
	total := 0
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		res, err := c.checkFile(filepath.ToSlash(rel))
		if err != nil {
			t.Fatal(err)
		}
		total += res.checked
		for _, p := range res.problems {
			t.Errorf("%s", p)
		}
		t.Logf("%s: %d links and file references checked", filepath.ToSlash(rel), res.checked)
	}
	if total == 0 {
		t.Fatal("no link or file reference was found: the extractor is broken")
	}
	t.Logf("%d links and file references checked in %d files", total, len(files))
}

// TestCheckerFindsBrokenLinks proves the checker on a small tree: every
// kind of broken reference is reported, and nothing that resolves is.
func TestCheckerFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) { writeFile(t, root, name, content) }
	write("go.work", "go 1.26.0\n")
	write("api/doc.go", "package api\n")
	write("api/export/identity.go", "package export\n")
	write("docs/other.md", "# Other page\n\n## The `make e2e` target\n\n## Step\n\n## Step\n\nSetext title\n============\n")
	write("docs/index.md", strings.Join([]string{
		"# Index",
		"",
		"## Fencing, tokens & marks",
		"",
		"Good: [same page](#fencing-tokens--marks), [other](other.md),",
		"[heading](other.md#the-make-e2e-target), [second step](other.md#step-1),",
		"[setext](other.md#setext-title), [root](/api/doc.go), [dir](../api),",
		"[web](https://example.com/x), `api/doc.go`, `api/export.For`,",
		"`not-a-dir/x.go`, `api/<name>.go`, `/var/lib/pillar-csi/node`.",
		"",
		"Bad: [missing file](nothere.md), [missing anchor](other.md#nope),",
		"[missing local](#nope-here), [third step](other.md#step-2), `api/gone.go`,",
		"[escape](../../outside.md), [bad url](https://exa mple.com/), ![img](pic.png),",
		"[ref]",
		"",
		"```sh",
		"cat [not a link](nowhere.md) `api/fenced.go`",
		"```",
		"",
		"    [indented](code.md) is a code block but is checked like text",
		"",
		"[ref]: missing-ref.md",
	}, "\n")+"\n")

	res, err := newChecker(root).checkFile("docs/index.md")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range res.problems {
		got[p.target] = true
	}
	wantBroken := []string{
		"nothere.md", "other.md#nope", "#nope-here", "other.md#step-2", "api/gone.go",
		"../../outside.md", "https://exa mple.com/", "pic.png", "missing-ref.md", "code.md",
	}
	for _, w := range wantBroken {
		if !got[w] {
			t.Errorf("broken reference %q was not reported; problems: %v", w, res.problems)
		}
		delete(got, w)
	}
	for extra := range got {
		t.Errorf("reference %q was reported broken but resolves", extra)
	}
	// Good: 10 links and references above that resolve, and 10 broken.
	if want := 20; res.checked != want {
		t.Errorf("checked %d references, want %d", res.checked, want)
	}
}

// TestSlug pins GitHub's heading anchors for the shapes our docs use.
func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Fencing, tokens & marks":            "fencing-tokens--marks",
		"The `make e2e` target":              "the-make-e2e-target",
		"Agent unreachable (`Unreachable`)":  "agent-unreachable-unreachable",
		"nvmet_tcp not loaded":               "nvmet_tcp-not-loaded",
		"[A link](x.md) in a heading":        "a-link-in-a-heading",
		"**Bold** and *em*":                  "bold-and-em",
		"ExportSpecMissing: step by step":    "exportspecmissing-step-by-step",
		"CO → controller → agent":            "co--controller--agent",
		"  Trailing spaces and closing  ":    "trailing-spaces-and-closing",
		"PillarVolumeState, the record (v1)": "pillarvolumestate-the-record-v1",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// repoRoot walks up from the working directory to the directory that holds
// go.work or .git.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		for _, marker := range []string{"go.work", ".git"} {
			if _, err := os.Stat(filepath.Join(dir, marker)); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work or .git above the working directory: cannot find the repository root")
		}
		dir = parent
	}
}

// problem is one reference that does not resolve.
type problem struct {
	file   string
	line   int
	target string
	why    string
}

func (p problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.file, p.line, p.target, p.why)
}

type result struct {
	checked  int
	problems []problem
}

// checker resolves references against one tree, caching each Markdown
// file's anchors.
type checker struct {
	root    string
	anchors map[string]map[string]bool
}

func newChecker(root string) *checker {
	return &checker{root: root, anchors: map[string]map[string]bool{}}
}

// ref is one link or file reference found in a Markdown file.
type ref struct {
	line   int
	target string
	code   bool // an inline code span naming a repository path
}

// checkFile checks every reference in the Markdown file rel (slash
// separated, relative to the root).
func (c *checker) checkFile(rel string) (result, error) {
	var res result
	data, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return res, err
	}
	for _, r := range extract(string(data)) {
		why, counted := c.resolve(rel, r)
		if !counted {
			continue
		}
		res.checked++
		if why != "" {
			res.problems = append(res.problems, problem{file: rel, line: r.line, target: r.target, why: why})
		}
	}
	return res, nil
}

// resolve returns why r does not resolve ("" when it does) and whether r
// counts as a reference at all (a code span that names no repository
// path does not).
func (c *checker) resolve(file string, r ref) (why string, counted bool) {
	if r.code {
		return c.resolveCode(r.target)
	}
	target := r.target
	if u, err := url.Parse(target); err != nil || strings.ContainsAny(target, " \t") {
		return "not a valid URL or path", true
	} else if u.Scheme != "" {
		switch u.Scheme {
		case "http", "https":
			if u.Host == "" {
				return "web link without a host", true
			}
			return "", true // never fetched: CI has no network
		case "mailto":
			return "", true
		}
		return fmt.Sprintf("unexpected URL scheme %q", u.Scheme), true
	}
	p, frag, _ := strings.Cut(target, "#")
	p, err := url.PathUnescape(p)
	if err != nil {
		return "bad escape in path", true
	}
	var rel string // slash separated, relative to the root
	switch {
	case p == "":
		rel = file
	case strings.HasPrefix(p, "/"):
		// GitHub resolves a leading slash from the repository root.
		rel = path.Clean(strings.TrimPrefix(p, "/"))
	default:
		rel = path.Join(path.Dir(file), p)
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "points outside the repository", true
	}
	fi, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return "no such file or directory", true
	}
	if frag == "" || fi.IsDir() || !strings.HasSuffix(rel, ".md") {
		return "", true
	}
	a, err := c.anchorsOf(rel)
	if err != nil {
		return err.Error(), true
	}
	if !a[frag] {
		return fmt.Sprintf("no heading with anchor #%s in %s", frag, rel), true
	}
	return "", true
}

// codePathRE is what a code span that names a repository path looks
// like: path elements of file-name characters, at least one slash.
var codePathRE = regexp.MustCompile(`^(\./)?[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_.+-]+)+/?$`)

// goIdentRE is a trailing exported Go identifier (api/export.For).
var goIdentRE = regexp.MustCompile(`\.[A-Z][A-Za-z0-9_]*$`)

// resolveCode checks an inline code span. It is a file reference when it
// looks like a relative path whose first element names an entry of the
// repository root (`csidriver/node/doc.go`); then the whole path must
// exist. Spans that name something else — `pillar-csi.io/store`,
// `/var/lib/pillar-csi/node`, `deploy/images/<name>/image.yaml` — are
// not references. bin/ holds build output, which a fresh clone lacks.
func (c *checker) resolveCode(span string) (why string, counted bool) {
	if !codePathRE.MatchString(span) || strings.Contains(span, "...") {
		return "", false
	}
	p := strings.TrimSuffix(strings.TrimPrefix(span, "./"), "/")
	first, _, _ := strings.Cut(p, "/")
	if first == "bin" || first == "." || first == ".." {
		return "", false
	}
	if _, err := os.Stat(filepath.Join(c.root, first)); err != nil {
		return "", false
	}
	if c.exists(p) {
		return "", true
	}
	if q := goIdentRE.ReplaceAllString(p, ""); q != p && c.exists(q) {
		return "", true // a package path and one of its identifiers
	}
	return "no such file or directory in the repository", true
}

func (c *checker) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel)))
	return err == nil
}

func (c *checker) anchorsOf(rel string) (map[string]bool, error) {
	if a, ok := c.anchors[rel]; ok {
		return a, nil
	}
	data, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	a := anchors(string(data))
	c.anchors[rel] = a
	return a, nil
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	atxRE     = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextRE  = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	linkRE    = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]*(?:\s[^)\s"']+)*)(?:\s+"[^"]*"|\s+'[^']*')?\s*\)`)
	autoRE    = regexp.MustCompile(`<((?:https?|mailto):[^>\s]*)>`)
	refDefRE  = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	htmlIDRE  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	htmlTagRE = regexp.MustCompile(`<[^>]+>`)
)

// lines yields the Markdown lines outside fenced code blocks, with their
// 1-based numbers.
func lines(md string, fn func(n int, line string)) {
	var fence string
	for i, line := range strings.Split(md, "\n") {
		if fence != "" {
			t := strings.TrimLeft(line, " ")
			if strings.HasPrefix(t, fence) && strings.TrimRight(t, string(fence[0])+" \t") == "" {
				fence = ""
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence = m[1]
			continue
		}
		fn(i+1, line)
	}
}

// extract finds the links, images, autolinks, reference definitions and
// path-like code spans of md, outside fenced code.
func extract(md string) []ref {
	var out []ref
	lines(md, func(n int, line string) {
		if m := refDefRE.FindStringSubmatch(line); m != nil {
			out = append(out, ref{line: n, target: strings.Trim(m[1], "<>")})
			return
		}
		text, spans := splitCode(line)
		for _, s := range spans {
			out = append(out, ref{line: n, target: s, code: true})
		}
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			out = append(out, ref{line: n, target: strings.Trim(m[1], "<>")})
		}
		for _, m := range autoRE.FindAllStringSubmatch(text, -1) {
			out = append(out, ref{line: n, target: m[1]})
		}
	})
	return out
}

// splitCode returns line with its inline code spans blanked out, and the
// spans' contents. A backtick run without a closing run of the same length
// is literal text.
func splitCode(line string) (text string, spans []string) {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		j := i
		for j < len(line) && line[j] == '`' {
			j++
		}
		run := line[i:j]
		end := -1
		for k := j; k < len(line); {
			if line[k] != '`' {
				k++
				continue
			}
			l := k
			for l < len(line) && line[l] == '`' {
				l++
			}
			if l-k == len(run) {
				end = k
				break
			}
			k = l
		}
		if end < 0 {
			b.WriteString(run)
			i = j
			continue
		}
		spans = append(spans, strings.TrimSpace(line[j:end]))
		b.WriteString(strings.Repeat(" ", end+len(run)-i))
		i = end + len(run)
	}
	return b.String(), spans
}

// anchors returns the anchors GitHub gives md's headings (ATX and setext,
// a repeated heading getting -1, -2, ...) and explicit <a name|id>.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	add := func(title string) {
		s := slug(title)
		if n, ok := seen[s]; ok {
			seen[s] = n + 1
			s += "-" + strconv.Itoa(n+1)
		} else {
			seen[s] = 0
		}
		out[s] = true
	}
	prev := ""
	lines(md, func(_ int, line string) {
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		switch {
		case atxRE.MatchString(line):
			add(atxRE.FindStringSubmatch(line)[1])
			prev = ""
			return
		case setextRE.MatchString(line) && paragraphLine(prev):
			add(prev)
			prev = ""
			return
		}
		prev = line
	})
	return out
}

// paragraphLine reports whether line can be the text of a setext heading
// (not blank, not a list item, quote, table row or heading).
func paragraphLine(line string) bool {
	t := strings.TrimSpace(line)
	if t == "" || strings.HasPrefix(line, "    ") {
		return false
	}
	for _, p := range []string{"- ", "* ", "+ ", ">", "|", "#"} {
		if strings.HasPrefix(t, p) {
			return false
		}
	}
	return !regexp.MustCompile(`^\d+[.)] `).MatchString(t)
}

var inlineLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's heading anchor: the rendered text lower-cased, every
// character that is not a letter, digit, mark, '_', '-' or space removed,
// each space turned into '-'.
func slug(title string) string {
	t := inlineLinkRE.ReplaceAllString(title, "$1")
	t = htmlTagRE.ReplaceAllString(t, "")
	t = strings.NewReplacer("`", "", "*", "").Replace(t)
	t = strings.ToLower(strings.TrimSpace(t))
	var b strings.Builder
	for _, r := range t {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// writeFile writes content to name (slash-separated) under root, making
// its directories: the small trees the checkers' own tests run on.
func writeFile(t *testing.T, root, name, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
