package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// DefinitionFile is the name of an image definition inside its directory.
const DefinitionFile = "image.yaml"

// Definition is one image, as deploy/images/<name>/image.yaml states it.
type Definition struct {
	// Name is the directory's name; it names the outputs.
	Name string `json:"-"`
	// Dir is the directory the definition was read from.
	Dir string `json:"-"`

	// Image is the repository part of the reference.
	Image string `json:"image"`
	// Tag, when set, pins the tag (third-party and pause images); our own
	// images take theirs from -tag.
	Tag        string            `json:"tag,omitempty"`
	Entrypoint []string          `json:"entrypoint"`
	Cmd        []string          `json:"cmd,omitempty"`
	Env        []string          `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Files      []File            `json:"files,omitempty"`
	Dirs       []Dir             `json:"dirs,omitempty"`
	Symlinks   []Symlink         `json:"symlinks,omitempty"`
	Packages   []Package         `json:"packages,omitempty"`
	Checks     []Check           `json:"checks,omitempty"`
	Absent     []string          `json:"absent,omitempty"`
}

// File is a file copied into the image, e.g. our binary.
type File struct {
	// Src is relative to the build's -root (the repository root), or to the
	// definition's directory when it starts with "./".
	Src  string `json:"src"`
	Dst  string `json:"dst"`
	Mode string `json:"mode,omitempty"`
}

// Dir is an empty directory the image needs (e.g. /tmp).
type Dir struct {
	Path string `json:"path"`
	Mode string `json:"mode,omitempty"`
}

// Symlink is a link that a maintainer script would have made (dpkg-deb -x
// runs none), e.g. /bin/sh -> dash.
type Symlink struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// Package is a Debian package at a pinned version.
type Package struct {
	// Deb is name=version.
	Deb string `json:"deb"`
	// Why says what needs the package; it is required so that nothing is
	// in an image without a reason.
	Why string `json:"why"`
	// Keep lists the paths (files, or directories with everything under
	// them) taken from the package; empty takes it all.
	Keep []string `json:"keep,omitempty"`
}

// Check is a command run in a chroot into the image's root filesystem.
type Check struct {
	Run []string `json:"run"`
	// Expect must occur in the combined output.
	Expect string `json:"expect"`
	// Status is the exit status expected (default 0), for tools that have no
	// version flag and exit non-zero after printing their banner.
	Status int `json:"status,omitempty"`
}

// Name and Version split Deb.
func (p Package) Name() string    { n, _, _ := strings.Cut(p.Deb, "="); return n }
func (p Package) Version() string { _, v, _ := strings.Cut(p.Deb, "="); return v }

var (
	debName    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	debVersion = regexp.MustCompile(`^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$`)
)

// LoadDefinition reads and validates dir/image.yaml. Unknown keys are errors:
// a misspelt key must not silently drop a package or a check.
func LoadDefinition(dir string) (*Definition, error) {
	p := filepath.Join(dir, DefinitionFile)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("image definition: %w", err)
	}
	var d Definition
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return nil, fmt.Errorf("image definition %s: %w", p, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image definition %s: %w", p, err)
	}
	d.Dir, d.Name = abs, filepath.Base(abs)
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("image definition %s: %w", p, err)
	}
	return &d, nil
}

func (d *Definition) validate() error {
	if d.Image == "" || strings.Contains(d.Image, "@") || strings.Contains(path.Base(d.Image), ":") {
		return fmt.Errorf("image %q: want a repository without tag or digest (put a pinned tag in tag:)", d.Image)
	}
	if len(d.Entrypoint) == 0 {
		return fmt.Errorf("no entrypoint")
	}
	seen := map[string]bool{}
	for _, p := range d.Packages {
		if !debName.MatchString(p.Name()) || !debVersion.MatchString(p.Version()) {
			return fmt.Errorf("package %q: want name=version with the version pinned", p.Deb)
		}
		if seen[p.Name()] {
			return fmt.Errorf("package %s listed twice", p.Name())
		}
		seen[p.Name()] = true
		if strings.TrimSpace(p.Why) == "" {
			return fmt.Errorf("package %s: why is required", p.Name())
		}
		for _, k := range p.Keep {
			if !path.IsAbs(k) {
				return fmt.Errorf("package %s: keep path %q is not absolute", p.Name(), k)
			}
		}
	}
	for _, f := range d.Files {
		if f.Src == "" || !path.IsAbs(f.Dst) {
			return fmt.Errorf("file %+v: want src and an absolute dst", f)
		}
		if _, err := parseMode(f.Mode, 0o644); err != nil {
			return fmt.Errorf("file %s: %w", f.Dst, err)
		}
	}
	for _, dir := range d.Dirs {
		if !path.IsAbs(dir.Path) {
			return fmt.Errorf("dir %q is not absolute", dir.Path)
		}
		if _, err := parseMode(dir.Mode, 0o755); err != nil {
			return fmt.Errorf("dir %s: %w", dir.Path, err)
		}
	}
	for _, s := range d.Symlinks {
		if !path.IsAbs(s.Path) || s.Target == "" {
			return fmt.Errorf("symlink %+v: want an absolute path and a target", s)
		}
	}
	for _, c := range d.Checks {
		if len(c.Run) == 0 || c.Expect == "" {
			return fmt.Errorf("check %q: want run and expect (a check that expects nothing proves nothing)", c.Run)
		}
	}
	return nil
}

// parseMode reads an octal mode such as "0755"; the YAML carries it as a
// string because YAML 1.1 and 1.2 disagree on what 0755 means.
func parseMode(s string, def os.FileMode) (os.FileMode, error) {
	if s == "" {
		return def, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m&^0o7777 != 0 {
		return 0, fmt.Errorf("mode %q: want octal permission bits such as \"0755\"", s)
	}
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode, nil
}
