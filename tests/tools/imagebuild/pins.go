package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// pins compares every package pin of the definitions with the version the
// archive offers now and, with update, rewrites the stale ones in place
// (only the version on the `deb:` line, so comments stay). It returns the
// number of stale pins.
func pins(ctx context.Context, w io.Writer, cache *debCache, files []string, update bool) (int, error) {
	stale := 0
	var defs []*Definition
	var names []string
	for _, file := range files {
		def, err := LoadDefinition(filepath.Dir(file))
		if err != nil {
			return stale, err
		}
		defs = append(defs, def)
		for _, p := range def.Packages {
			if !slices.Contains(names, p.Name()) {
				names = append(names, p.Name())
			}
		}
	}
	if len(names) == 0 {
		return 0, nil
	}
	candidates, err := cache.candidates(ctx, names)
	if err != nil {
		return stale, err
	}
	for i, file := range files {
		def := defs[i]
		data, err := os.ReadFile(file)
		if err != nil {
			return stale, fmt.Errorf("pins: %w", err)
		}
		text := string(data)
		for _, p := range def.Packages {
			want := candidates[p.Name()]
			state := "current"
			if want != p.Version() {
				stale++
				state = "stale: archive has " + want
				if update {
					var n int
					text, n = replacePin(text, p.Name(), p.Version(), want)
					if n != 1 {
						return stale, fmt.Errorf("pins: %s: found %d `deb: %s` lines, want 1", file, n, p.Deb)
					}
					state = "updated to " + want
				}
			}
			fmt.Fprintf(w, "%-18s %-22s %-26s %s\n", def.Name, p.Name(), p.Version(), state)
		}
		if update && text != string(data) {
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				return stale, fmt.Errorf("pins: %w", err)
			}
		}
	}
	return stale, nil
}

// replacePin rewrites `deb: name=old` to `deb: name=new` and reports how
// many lines it changed.
func replacePin(text, pkg, old, new string) (string, int) {
	re := regexp.MustCompile(`(?m)^(\s*-?\s*deb:\s*["']?)` + regexp.QuoteMeta(pkg+"="+old) + `(["']?\s*(#.*)?)$`)
	n := len(re.FindAllStringIndex(text, -1))
	return re.ReplaceAllString(text, "${1}"+strings.ReplaceAll(pkg+"="+new, "$", "$$")+"${2}"), n
}
