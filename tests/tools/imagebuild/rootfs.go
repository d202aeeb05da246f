package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// docPaths are never copied from a package taken whole: nothing in a
// container reads them at run time. The one exception is each package's
// usr/share/doc/<package>/copyright, always copied when the package has
// it: the image redistributes the package, and its licence travels with
// it.
var docPaths = []string{
	"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian",
	"usr/share/bug", "usr/share/bash-completion", "usr/share/locale",
}

// assembleRootfs builds def's root filesystem in dir, which must not exist.
// root is the directory relative file sources are resolved against.
func assembleRootfs(ctx context.Context, def *Definition, root, dir string, cache *debCache) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("root filesystem: %w", err)
	}
	scratch, err := os.MkdirTemp(filepath.Dir(dir), ".unpack-")
	if err != nil {
		return fmt.Errorf("root filesystem: %w", err)
	}
	defer os.RemoveAll(scratch)

	for _, p := range def.Packages {
		deb, err := cache.Fetch(ctx, p)
		if err != nil {
			return err
		}
		pkgDir := filepath.Join(scratch, p.Name())
		if err := cache.unpack(ctx, deb, pkgDir); err != nil {
			return err
		}
		if err := copyPackage(pkgDir, dir, p); err != nil {
			return fmt.Errorf("package %s: %w", p.Deb, err)
		}
	}
	for _, d := range def.Dirs {
		mode, _ := parseMode(d.Mode, 0o755)
		if err := mkdirAll(dir, d.Path); err != nil {
			return err
		}
		// Chmod, not Mkdir's mode: the umask would drop /tmp's sticky bit.
		if err := os.Chmod(filepath.Join(dir, d.Path), mode|os.ModeDir); err != nil {
			return fmt.Errorf("root filesystem: %w", err)
		}
	}
	for _, f := range def.Files {
		src := f.Src
		if strings.HasPrefix(src, "./") {
			src = filepath.Join(def.Dir, src)
		} else if !filepath.IsAbs(src) {
			src = filepath.Join(root, src)
		}
		mode, _ := parseMode(f.Mode, 0o644)
		if err := mkdirAll(dir, path.Dir(f.Dst)); err != nil {
			return err
		}
		if err := copyFile(src, filepath.Join(dir, f.Dst), mode); err != nil {
			return fmt.Errorf("file %s: %w", f.Dst, err)
		}
	}
	for _, s := range def.Symlinks {
		if err := mkdirAll(dir, path.Dir(s.Path)); err != nil {
			return err
		}
		if err := os.Symlink(s.Target, filepath.Join(dir, s.Path)); err != nil {
			return fmt.Errorf("symlink %s: %w", s.Path, err)
		}
	}
	return nil
}

// copyPackage copies what p keeps from its unpacked tree into dst. A keep
// path the package does not have is an error: after a version bump it means
// the image would silently lose a tool.
func copyPackage(src, dst string, p Package) error {
	keep := make(map[string]bool, len(p.Keep))
	for _, k := range p.Keep {
		keep[strings.TrimPrefix(path.Clean(k), "/")] = false
	}
	copyright := "usr/share/doc/" + p.Name() + "/copyright"
	wanted := func(rel string) (bool, bool) { // take it, descend into it
		if rel == copyright {
			return true, false
		}
		toCopyright := strings.HasPrefix(copyright, rel+"/")
		if len(keep) == 0 {
			for _, d := range docPaths {
				if rel == d || strings.HasPrefix(rel, d+"/") {
					return false, toCopyright
				}
			}
			return true, true
		}
		for k := range keep {
			if rel == k || strings.HasPrefix(rel, k+"/") {
				keep[k] = true
				return true, true
			}
			if strings.HasPrefix(k, rel+"/") {
				return false, true // an ancestor: made by mkdirAll when needed
			}
		}
		return false, toCopyright
	}
	links := map[uint64]string{} // inode -> first copy, for hard links
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		take, descend := wanted(filepath.ToSlash(rel))
		if !take {
			if e.IsDir() && !descend {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if err := mkdirAll(dst, path.Dir("/"+filepath.ToSlash(rel))); err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return os.Chmod(target, fi.Mode())
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(t, target)
		case fi.Mode().IsRegular():
			st := fi.Sys().(*syscall.Stat_t)
			if first, ok := links[st.Ino]; ok && st.Nlink > 1 {
				return os.Link(first, target)
			}
			links[st.Ino] = target
			return copyFile(p, target, fi.Mode())
		default:
			return fmt.Errorf("%s: unsupported file type %s", rel, fi.Mode().Type())
		}
	})
	if err != nil {
		return err
	}
	for k, found := range keep {
		if !found {
			return fmt.Errorf("keep: the package has no /%s", k)
		}
	}
	return nil
}

// mkdirAll makes image path p (and its parents) under root as plain 0755
// directories, leaving existing ones alone.
func mkdirAll(root, p string) error {
	if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
		return fmt.Errorf("root filesystem: %w", err)
	}
	return nil
}

// copyFile copies src to dst, which must not exist: two packages (or a
// package and a file of ours) shipping one path is a definition error, not
// something to resolve by order.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	// Chmod after writing: the umask must not drop bits, and mount's
	// setuid bit is part of the package.
	return os.Chmod(dst, mode)
}
