package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// BusyboxImage is the image the harness builds from the host's static
// busybox (package busybox-static) for the suites' own pods: a shell and
// every busybox applet at its usual path in 2 MB, and no registry needed.
const BusyboxImage = "pillar-lab.local/busybox:e2e"

// fallbackPauseImage is the sandbox image the harness builds when make
// images has not written bin/images/pause.tar: the same busybox, sleeping
// as PID 1 and exiting on SIGTERM. Any static binary that sleeps serves
// as a pod sandbox's process.
const fallbackPauseImage = "pillar-lab.local/pause:e2e"

// hostBusybox is the host's static busybox (package busybox-static).
const hostBusybox = "/bin/busybox"

// busyboxApplets lists the applets of busybox with their paths
// ("usr/bin/head"), as `busybox --list-full` prints them.
func busyboxApplets(ctx context.Context, busybox string) ([]string, error) {
	out, err := run(ctx, cmdTimeout, nil, busybox, "--list-full")
	if err != nil {
		return nil, fmt.Errorf("busybox applets: %w (package busybox-static)", err)
	}
	return strings.Fields(string(out)), nil
}

// imageFile is a file of the host copied into an image at name.
type imageFile struct {
	name, src string
}

// libraryDirs are where hostToolFiles looks for a shared library, in the
// order of Debian's dynamic loader.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// GlibcStandInTools are the host files the stand-in for a test image
// built on glibc carries over its busybox applets, by path in the image:
// GNU dd (the Kubernetes e2e suite's multiVolume specs write with
// dd oflag=nocache, which busybox's dd refuses) and, as /bin/sh, dash.
// The shell matters as much as dd: Debian's busybox-static is built to
// run its own applet for a command before looking at PATH, so under
// busybox's sh a "dd" in a pipeline is busybox's dd whatever PATH holds.
var GlibcStandInTools = map[string]string{
	"/bin/sh":     "/bin/dash",
	"/usr/bin/dd": "/usr/bin/dd",
}

// hostToolFiles returns the image files that run the host binaries tools
// (path in the image → path on the host): each binary at its path in the
// image, and every shared library it needs (and they need) with the ELF
// interpreter, at the paths the interpreter finds them.
func hostToolFiles(tools map[string]string) ([]imageFile, error) {
	var files []imageFile
	seen := map[string]bool{}
	add := func(path string) {
		if !seen[path] {
			seen[path] = true
			files = append(files, imageFile{name: path, src: path})
		}
	}
	var walk func(bin string) error
	walk = func(bin string) error {
		f, err := elf.Open(bin)
		if err != nil {
			return err
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return fmt.Errorf("%s: interpreter: %w", bin, err)
			}
			add(strings.TrimRight(string(b), "\x00"))
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: %w", bin, err)
		}
		for _, lib := range libs {
			path := ""
			for _, d := range libraryDirs {
				if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
					path = filepath.Join(d, lib)
					break
				}
			}
			if path == "" {
				return fmt.Errorf("%s: shared library %s not found in %s", bin, lib, strings.Join(libraryDirs, " "))
			}
			if seen[path] {
				continue
			}
			add(path)
			if err := walk(path); err != nil {
				return err
			}
		}
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(tools)) {
		src := tools[name]
		if !seen[name] {
			seen[name] = true
			files = append(files, imageFile{name: name, src: src})
		}
		if err := walk(src); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// writeBusyboxImage writes a docker-archive tarball (what
// `ctr images import` and `docker load` read) of a one-layer image named
// by refs: /bin/busybox from busybox, a symlink to it at each applet path,
// the extra files (executable, in directories of their own where needed),
// and entrypoint. Commands run without a shell (an exec of "head") find
// their applet on PATH. Nothing in it depends on the time or the host, so
// the same busybox gives the same image.
func writeBusyboxImage(out, busybox string, applets, refs, entrypoint []string, extra ...imageFile) error {
	ref := strings.Join(refs, ",")
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("image %s: %w (package busybox-static)", ref, err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := []string{"bin", "dev", "etc", "proc", "sbin", "sys", "tmp", "usr", "usr/bin", "usr/sbin", "var"}
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb)), Format: tar.FormatPAX}); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	if _, err := tw.Write(bb); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	seen := map[string]bool{"bin/busybox": true}
	for _, d := range dirs {
		seen[d] = true
	}
	for _, x := range extra {
		data, err := os.ReadFile(x.src)
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		name := strings.TrimPrefix(x.name, "/")
		// The directories an extra file lands in, outermost first.
		var parents []string
		for d := filepath.Dir(name); d != "." && !seen[d]; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			seen[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return fmt.Errorf("image %s: %w", ref, err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(data)), Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		seen[name] = true
	}
	for _, a := range applets {
		a = strings.TrimPrefix(a, "/")
		if seen[a] || strings.Contains(a, "..") {
			continue
		}
		seen[a] = true
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: a, Linkname: "/bin/busybox", Mode: 0o777, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	diffID := sha256.Sum256(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Env":        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := hex.EncodeToString(diffID[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": refs, "Layers": []string{layerName}}})
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	defer os.Remove(tmp)
	aw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{configName, config}, {layerName, layer.Bytes()}, {"manifest.json", manifest}} {
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Format: tar.FormatPAX}); err != nil {
			f.Close()
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if _, err := aw.Write(e.data); err != nil {
			f.Close()
			return fmt.Errorf("image %s: %w", ref, err)
		}
	}
	if err := aw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("image %s: %w", ref, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	return os.Rename(tmp, out)
}

// imageRefs returns the references an image tarball names: RepoTags of a
// docker archive's manifest.json, or the ref-name annotations of an OCI
// layout's index.json. The harness needs the pause image's name before
// containerd starts (it is the sandbox_image of containerd's config).
func imageRefs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var refs []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch strings.TrimPrefix(h.Name, "./") {
		case "manifest.json":
			var m []struct{ RepoTags []string }
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				return nil, fmt.Errorf("%s: manifest.json: %w", path, err)
			}
			for _, e := range m {
				refs = append(refs, e.RepoTags...)
			}
		case "index.json":
			var ix struct {
				Manifests []struct{ Annotations map[string]string }
			}
			if err := json.NewDecoder(tr).Decode(&ix); err != nil {
				return nil, fmt.Errorf("%s: index.json: %w", path, err)
			}
			for _, m := range ix.Manifests {
				for _, k := range []string{"io.containerd.image.name", "org.opencontainers.image.ref.name"} {
					if v := m.Annotations[k]; strings.Contains(v, "/") || strings.Contains(v, ":") {
						refs = append(refs, v)
						break
					}
				}
			}
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s: names no image (no RepoTags in manifest.json, no ref names in index.json)", path)
	}
	return dedup(refs), nil
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// imageTars lists dir/*.tar, sorted; a missing dir is no tarballs.
func imageTars(dir string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	return m, nil
}
