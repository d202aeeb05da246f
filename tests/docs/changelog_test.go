package docs_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestChangelogSections fails when a version of CHANGELOG.md has a kind
// of change (### Added, ### Security, ...) twice: an entry then hides in
// the second copy, which readers of the first never see.
func TestChangelogSections(t *testing.T) {
	for _, d := range duplicateSections(repoFile(t, "CHANGELOG.md")) {
		t.Errorf("CHANGELOG.md: %s", d)
	}
}

func TestDuplicateSections(t *testing.T) {
	md := "# Changelog\n\n## [Unreleased]\n\n### Security\n\n- a\n\n### Added\n\n```\n### Added\n```\n\n### Security\n\n- b\n\n## [0.1.0]\n\n### Added\n"
	want := []string{"[Unreleased]: ### Security, lines 5 and 15"}
	if got := duplicateSections(md); !reflect.DeepEqual(got, want) {
		t.Errorf("duplicateSections = %q, want %q", got, want)
	}
}

// duplicateSections returns each "### kind" heading found twice under one
// "## version" heading, outside fenced code, as "version: ### kind, lines
// A and B".
func duplicateSections(md string) []string {
	var dups []string
	version, seen := "", map[string]int{}
	lines(md, func(n int, line string) {
		switch {
		case strings.HasPrefix(line, "## "):
			version, seen = strings.TrimSpace(line[3:]), map[string]int{}
		case strings.HasPrefix(line, "### "):
			kind := strings.TrimSpace(line[4:])
			if first, ok := seen[kind]; ok {
				dups = append(dups, fmt.Sprintf("%s: ### %s, lines %d and %d", version, kind, first, n))
				return
			}
			seen[kind] = n
		}
	})
	return dups
}
