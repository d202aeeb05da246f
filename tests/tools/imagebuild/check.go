package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checkRootfs proves that def's image works: the static verification of
// build (symlinks, interpreters, libraries) again, no forbidden command
// anywhere in the tree, and every check run in a chroot into rootfs, so
// that a library the loader cannot find fails here rather than in a pod.
// It reports every failure, not just the first.
func checkRootfs(ctx context.Context, def *Definition, rootfs string, r runner) error {
	rootfs, err := filepath.Abs(rootfs) // chroot runs in /
	if err != nil {
		return fmt.Errorf("check %s: %w", def.Name, err)
	}
	if fi, err := os.Stat(rootfs); err != nil || !fi.IsDir() {
		return fmt.Errorf("check %s: no root filesystem at %s (run make images): %w", def.Name, rootfs, err)
	}
	var problems []string
	if err := verifyRootfs(rootfs); err != nil {
		problems = append(problems, err.Error())
	}
	absent := map[string]bool{}
	for _, a := range def.Absent {
		absent[a] = true
	}
	if len(absent) > 0 {
		err := filepath.WalkDir(rootfs, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() && absent[e.Name()] {
				problems = append(problems, fmt.Sprintf("%s must not be in the image", strings.TrimPrefix(p, rootfs)))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("check %s: %w", def.Name, err)
		}
	}
	if len(def.Checks) > 0 && os.Geteuid() != 0 {
		return fmt.Errorf("check %s: the checks chroot into %s, which needs root", def.Name, rootfs)
	}
	for _, c := range def.Checks {
		out, err := r.run(ctx, "/", append([]string{"chroot", rootfs}, c.Run...)...)
		status := 0
		var ce *CommandError
		if errors.As(err, &ce) {
			status = ce.Status
		}
		cmd := strings.Join(c.Run, " ")
		switch {
		case strings.Contains(out, "error while loading shared libraries"):
			problems = append(problems, fmt.Sprintf("%s: %s", cmd, strings.TrimSpace(out)))
		case err != nil && ce == nil:
			problems = append(problems, fmt.Sprintf("%s: %v", cmd, err))
		case status != c.Status:
			problems = append(problems, fmt.Sprintf("%s: exit status %d, want %d: %s", cmd, status, c.Status, strings.TrimSpace(out)))
		case !strings.Contains(out, c.Expect):
			problems = append(problems, fmt.Sprintf("%s: output lacks %q: %s", cmd, c.Expect, strings.TrimSpace(out)))
		default:
			fmt.Printf("  ok  %-12s %-40s %s\n", def.Name, cmd, firstLine(out))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("check %s:\n  %s", def.Name, strings.Join(problems, "\n  "))
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
