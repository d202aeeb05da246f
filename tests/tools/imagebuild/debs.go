package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ErrPinNotInArchive is returned when the archive no longer has a pinned
// version (Debian keeps only the current version of each suite).
var ErrPinNotInArchive = errors.New("pinned version is not in the Debian archive")

// debCache downloads pinned Debian packages once and keeps them: the
// archive drops a version when a point release or a security update
// replaces it, and a cached .deb keeps the image buildable (and identical)
// after that.
type debCache struct {
	dir string
	run runner
	// aptUpdate runs `apt-get update` at most once per build, and only when
	// a pin is not found: stale indexes are the common reason.
	aptUpdate sync.Once
	updateErr error
}

// Path is where the cache keeps name=version.
func (c *debCache) Path(p Package) string {
	return filepath.Join(c.dir, "debs", fmt.Sprintf("%s_%s_amd64.deb", p.Name(), strings.ReplaceAll(p.Version(), ":", "%3a")))
}

// Fetch returns the cached .deb of p, downloading it with `apt-get download`
// (which checks it against the signed archive indexes) when missing.
func (c *debCache) Fetch(ctx context.Context, p Package) (string, error) {
	dst := c.Path(p)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("package cache: %w", err)
	}
	err := c.download(ctx, p, dst)
	if errors.Is(err, ErrPinNotInArchive) {
		c.aptUpdate.Do(func() {
			_, c.updateErr = c.run.run(ctx, "/", "apt-get", "update")
		})
		if c.updateErr != nil {
			return "", fmt.Errorf("package %s: %w; apt-get update failed too: %w", p.Deb, err, c.updateErr)
		}
		err = c.download(ctx, p, dst)
	}
	if errors.Is(err, ErrPinNotInArchive) {
		return "", fmt.Errorf("package %s: %w; the archive has moved on: run `make images-update-pins`, "+
			"review the new versions in deploy/images/*/image.yaml and rebuild", p.Name(), err)
	}
	return dst, err
}

func (c *debCache) download(ctx context.Context, p Package, dst string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dst), ".download-")
	if err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	// apt-get download drops privileges to _apt, which may not write here.
	if err := os.Chmod(tmp, 0o777); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	out, err := c.run.run(ctx, tmp, "apt-get", "download", "-q", p.Deb)
	if err != nil {
		if strings.Contains(out, "was not found") || strings.Contains(out, "Unable to locate package") ||
			strings.Contains(out, "Can't find a source") {
			return fmt.Errorf("%w: %w", ErrPinNotInArchive, err)
		}
		return fmt.Errorf("package %s: %w", p.Deb, err)
	}
	got, err := filepath.Glob(filepath.Join(tmp, p.Name()+"_*.deb"))
	if err != nil || len(got) != 1 {
		return fmt.Errorf("package %s: apt-get download left %v in %s", p.Deb, got, tmp)
	}
	if err := os.Rename(got[0], dst); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	return nil
}

// unpack extracts a .deb's files with dpkg-deb -x: no maintainer scripts,
// no dpkg database, nothing outside dir.
func (c *debCache) unpack(ctx context.Context, deb, dir string) error {
	if _, err := c.run.run(ctx, "/", "dpkg-deb", "-x", deb, dir); err != nil {
		return fmt.Errorf("unpack %s: %w", filepath.Base(deb), err)
	}
	return nil
}

// candidates are the versions `apt-cache policy` would install now, by
// package name. One call for all: apt-cache loads its whole cache each time.
func (c *debCache) candidates(ctx context.Context, names []string) (map[string]string, error) {
	out, err := c.run.run(ctx, "/", append([]string{"apt-cache", "policy"}, names...)...)
	if err != nil {
		return nil, fmt.Errorf("apt-cache policy: %w", err)
	}
	got := map[string]string{}
	var pkg string
	for _, line := range strings.Split(out, "\n") {
		if h, ok := strings.CutSuffix(line, ":"); ok && !strings.HasPrefix(line, " ") {
			pkg = h
			continue
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate:"); ok && pkg != "" {
			if v = strings.TrimSpace(v); v != "" && v != "(none)" {
				got[pkg] = v
			}
		}
	}
	for _, n := range names {
		if got[n] == "" {
			return nil, fmt.Errorf("package %s: apt-cache policy names no candidate (run apt-get update?)", n)
		}
	}
	return got, nil
}
