package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// libDirs are the directories Debian's ld.so searches without an
// ld.so.cache (glibc's slibdir and libdir for the multiarch triplet); the
// images have no cache, because making one would run ldconfig.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"}

// verifyRootfs fails when the tree under root would break at run time in a
// way the loader reports only when the program starts: a dangling symlink,
// an ELF interpreter or a DT_NEEDED library that is not in the tree. Every
// problem is reported, not just the first.
func verifyRootfs(root string) error {
	var problems []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + filepath.ToSlash(strings.TrimPrefix(p, root))
		rel = path.Clean(rel)
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			if _, err := resolveIn(root, rel); err != nil {
				problems = append(problems, fmt.Sprintf("%s: dangling symlink: %v", rel, err))
			}
		case e.Type().IsRegular():
			problems = append(problems, checkELF(root, p, rel)...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("verify %s: %w", root, err)
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("verify %s: %d problem(s):\n  %s", root, len(problems), strings.Join(problems, "\n  "))
	}
	return nil
}

// checkELF returns what file (at image path rel) needs and the tree lacks.
func checkELF(root, file, rel string) []string {
	f, err := os.Open(file)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", rel, err)}
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || !bytes.Equal(magic, []byte(elf.ELFMAG)) {
		return nil
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return []string{fmt.Sprintf("%s: not a readable ELF file: %v", rel, err)}
	}
	defer ef.Close()
	if ef.Machine != elf.EM_X86_64 {
		return []string{fmt.Sprintf("%s: ELF for %s, not x86-64", rel, ef.Machine)}
	}
	var problems []string
	for _, prog := range ef.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(prog.Open())
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: interpreter: %v", rel, err))
			continue
		}
		interp := string(bytes.TrimRight(b, "\x00"))
		if _, err := resolveFile(root, interp); err != nil {
			problems = append(problems, fmt.Sprintf("%s: interpreter %s: %v", rel, interp, err))
		}
	}
	needed, err := ef.ImportedLibraries()
	if err != nil {
		return append(problems, fmt.Sprintf("%s: DT_NEEDED: %v", rel, err))
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, _ := ef.DynString(tag)
		for _, rp := range paths {
			for _, d := range strings.Split(rp, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", path.Dir(rel)))
			}
		}
	}
	dirs = append(dirs, libDirs...)
	for _, lib := range needed {
		found := false
		for _, d := range dirs {
			if _, err := resolveFile(root, path.Join(d, lib)); err == nil {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%s: needs %s, which is in none of %v", rel, lib, dirs))
		}
	}
	return problems
}

// resolveFile resolves p inside root and requires a regular file.
func resolveFile(root, p string) (string, error) {
	r, err := resolveIn(root, p)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(filepath.Join(root, r))
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", r)
	}
	return r, nil
}

// resolveIn resolves image path p inside root the way the kernel would
// after a chroot to root: absolute symlinks restart at root, and ".." never
// leaves it. It returns the resolved image path.
func resolveIn(root, p string) (string, error) {
	rest := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur, hops := "/", 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", fmt.Errorf("%s: %w", next, errNotInImage(err))
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		t, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(t) {
			cur = "/"
		}
		rest = append(strings.Split(strings.Trim(t, "/"), "/"), rest...)
	}
	return cur, nil
}

func errNotInImage(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("not in the image: %w", err)
	}
	return err
}
