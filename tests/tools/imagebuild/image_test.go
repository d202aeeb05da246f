package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var testEpoch = time.Unix(1700000000, 0).UTC()

// copyFixture copies testdata/fixture to a fresh directory, stamping the
// files with mtime and mode bits of its own, so that a build that leaked
// either into the image would not be reproducible.
func copyFixture(t *testing.T, mtime time.Time) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fixture")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("testdata/fixture")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("testdata/fixture", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, e.Name())
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func buildFixture(t *testing.T, dir string, epoch time.Time) (*Result, string) {
	t.Helper()
	def, err := LoadDefinition(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	res, err := build(context.Background(), def, buildOptions{
		Root: dir, Out: out, Epoch: epoch,
		Labels: map[string]string{"org.opencontainers.image.version": "test"},
		Cache:  &debCache{dir: t.TempDir(), run: runner{timeout: time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, out
}

func TestBuildIsReproducible(t *testing.T) {
	a, outA := buildFixture(t, copyFixture(t, time.Unix(1, 0)), testEpoch)
	b, outB := buildFixture(t, copyFixture(t, time.Now()), testEpoch)
	if *a != *b {
		t.Fatalf("two builds of the same inputs differ:\n%+v\n%+v", a, b)
	}
	for _, f := range []string{"fixture.tar", "fixture.oci/index.json", "fixture.json"} {
		x, err := os.ReadFile(filepath.Join(outA, f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(outB, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two builds of the same inputs", f)
		}
	}
	if !strings.HasPrefix(a.Digest, "sha256:") || a.Reference != "example.test/fixture:1" {
		t.Errorf("result = %+v", a)
	}
}

// The digest must depend on what the image holds, or the reproducibility
// test above would pass for a builder that ignored its inputs.
func TestDigestFollowsInputs(t *testing.T) {
	base, _ := buildFixture(t, copyFixture(t, testEpoch), testEpoch)

	other, _ := buildFixture(t, copyFixture(t, testEpoch), testEpoch.Add(time.Second))
	if other.Digest == base.Digest {
		t.Error("another epoch gave the same digest")
	}

	dir := copyFixture(t, testEpoch)
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, _ := buildFixture(t, dir, testEpoch)
	if changed.Digest == base.Digest {
		t.Error("another file content gave the same digest")
	}
}

func TestLayerIsNormalized(t *testing.T) {
	_, out := buildFixture(t, copyFixture(t, time.Now()), testEpoch)
	p, err := layout.FromPath(filepath.Join(out, "fixture.oci"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["io.containerd.image.name"] != "example.test/fixture:1" {
		t.Fatalf("index = %+v", m.Manifests)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	man, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if man.Annotations["org.opencontainers.image.version"] != "test" || man.Annotations["org.opencontainers.image.title"] != "fixture" {
		t.Errorf("manifest annotations = %v, want the image's org.opencontainers.image labels", man.Annotations)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cf.Created.Equal(testEpoch) || cf.Config.Entrypoint[0] != "/bin/hello" ||
		cf.Config.Labels["org.opencontainers.image.version"] != "test" ||
		cf.Config.Labels["org.opencontainers.image.title"] != "fixture" || cf.Config.User != "" {
		t.Errorf("config = %+v, created %v", cf.Config, cf.Created)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(testEpoch) {
			t.Errorf("history created %v, want the epoch", h.Created)
		}
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %v, %v", layers, err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header carries name %q, time %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	modes := map[string]int64{}
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		modes[h.Name] = h.Mode
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q, want 0:0 without names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(testEpoch) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: times %v %v %v, want the epoch only", h.Name, h.ModTime, h.AccessTime, h.ChangeTime)
		}
	}
	want := []string{"bin/", "bin/greet", "bin/hello", "etc/", "etc/fixture", "tmp/", "usr/", "usr/bin/",
		"usr/bin/setuid-data", "usr/share/", "usr/share/fixture/", "usr/share/fixture/data.txt", "var/", "var/empty/"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("entries:\n got %v\nwant %v", names, want)
	}
	for name, mode := range map[string]int64{"tmp/": 0o1777, "usr/bin/setuid-data": 0o4755, "bin/hello": 0o755,
		"usr/share/fixture/data.txt": 0o644, "var/empty/": 0o755} {
		if modes[name] != mode {
			t.Errorf("%s: mode %o, want %o", name, modes[name], mode)
		}
	}
}

// The docker archive must name the image, or `ctr images import` would
// import it untagged.
func TestDockerArchiveIsTagged(t *testing.T) {
	_, out := buildFixture(t, copyFixture(t, testEpoch), testEpoch)
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(filepath.Join(out, "fixture.tar")) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != "example.test/fixture:1" {
		t.Fatalf("manifest.json = %+v", m)
	}
}

// hostRoot makes a root filesystem holding the host's /bin/true and, when
// withLibs, the loader and libc it needs.
func hostRoot(t *testing.T, withLibs bool) string {
	t.Helper()
	root := t.TempDir()
	files := []string{"/bin/true"}
	if withLibs {
		files = append(files, "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatalf("this test needs the host's %s (a Debian x86-64 userland): %v", f, err)
		}
		if err := mkdirAll(root, filepath.Dir(f)); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(real, filepath.Join(root, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if withLibs {
		if err := mkdirAll(root, "/lib64"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", filepath.Join(root, "lib64/ld-linux-x86-64.so.2")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestVerifyFindsMissingLibraries(t *testing.T) {
	err := verifyRootfs(hostRoot(t, false))
	if err == nil {
		t.Fatal("a dynamic binary without its libraries passed")
	}
	for _, want := range []string{"/bin/true: interpreter /lib64/ld-linux-x86-64.so.2", "/bin/true: needs libc.so.6"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err := verifyRootfs(hostRoot(t, true)); err != nil {
		t.Errorf("complete tree: %v", err)
	}
}

func TestVerifyFindsDanglingSymlinks(t *testing.T) {
	root := hostRoot(t, true)
	if err := os.Symlink("/bin/missing", filepath.Join(root, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	err := verifyRootfs(root)
	if err == nil || !strings.Contains(err.Error(), "/bin/sh: dangling symlink") {
		t.Fatalf("err = %v", err)
	}
}

func TestResolveStaysInRoot(t *testing.T) {
	root := t.TempDir()
	if err := mkdirAll(root, "/a/b"); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"/a/abs": "/a/b", "/a/rel": "b", "/a/up": "../../../a/b", "/loop": "/loop"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for in, want := range map[string]string{"/a/abs": "/a/b", "/a/rel": "/a/b", "/a/up": "/a/b", "/a/rel/../abs": "/a/b"} {
		if got, err := resolveIn(root, in); err != nil || got != want {
			t.Errorf("resolveIn(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := resolveIn(root, "/loop"); err == nil {
		t.Error("a symlink loop resolved")
	}
}

// The chroot checks must catch what only the loader notices at run time.
func TestCheckRunsInChroot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chroots, which needs root (make images-check runs as root)")
	}
	def := &Definition{Name: "t", Checks: []Check{{Run: []string{"/bin/true", "--version"}, Expect: "true (GNU coreutils)"}}}
	r := runner{timeout: 30 * time.Second}
	if err := checkRootfs(context.Background(), def, hostRoot(t, true), r); err != nil {
		t.Fatalf("complete tree: %v", err)
	}

	root := hostRoot(t, true)
	if err := os.Remove(filepath.Join(root, "lib/x86_64-linux-gnu/libc.so.6")); err != nil {
		t.Fatal(err)
	}
	err := checkRootfs(context.Background(), def, root, r)
	if err == nil || !strings.Contains(err.Error(), "error while loading shared libraries") {
		t.Fatalf("tree without libc: err = %v", err)
	}

	def.Checks[0].Expect = "something else"
	err = checkRootfs(context.Background(), def, hostRoot(t, true), r)
	if err == nil || !strings.Contains(err.Error(), `output lacks "something else"`) {
		t.Fatalf("wrong expectation: err = %v", err)
	}
}

func TestCheckFindsForbiddenCommands(t *testing.T) {
	root := hostRoot(t, true)
	if err := mkdirAll(root, "/usr/sbin"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/zfs"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	def := &Definition{Name: "t", Absent: []string{"zfs", "lvm"}}
	err := checkRootfs(context.Background(), def, root, runner{timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "/usr/sbin/zfs must not be in the image") {
		t.Fatalf("err = %v", err)
	}
}

func TestDefinitionIsStrict(t *testing.T) {
	for name, body := range map[string]string{
		"unknown key":   "image: x/y\nentrypoint: [/a]\npackagez: []\n",
		"unpinned":      "image: x/y\nentrypoint: [/a]\npackages: [{deb: dash, why: sh}]\n",
		"no reason":     "image: x/y\nentrypoint: [/a]\npackages: [{deb: dash=0.5.12-2}]\n",
		"tag in image":  "image: x/y:1\nentrypoint: [/a]\n",
		"empty expect":  "image: x/y\nentrypoint: [/a]\nchecks: [{run: [/a]}]\n",
		"relative keep": "image: x/y\nentrypoint: [/a]\npackages: [{deb: dash=0.5.12-2, why: sh, keep: [bin/dash]}]\n",
		"decimal mode":  "image: x/y\nentrypoint: [/a]\nfiles: [{src: a, dst: /a, mode: \"0789\"}]\n",
	} {
		dir := filepath.Join(t.TempDir(), "img")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, DefinitionFile), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadDefinition(dir); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The deploy/images definitions are what make images builds: they must all
// load, and our own images must leave their tag to the build.
func TestRepositoryDefinitionsLoad(t *testing.T) {
	dirs, err := filepath.Glob("../../../deploy/images/*/" + DefinitionFile)
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no definitions under deploy/images: %v", err)
	}
	for _, f := range dirs {
		def, err := LoadDefinition(filepath.Dir(f))
		if err != nil {
			t.Error(err)
			continue
		}
		if strings.HasPrefix(def.Image, "ghcr.io/pillar-csi/pillar-") && def.Tag != "" {
			t.Errorf("%s pins tag %q; our images take IMAGE_TAG", def.Name, def.Tag)
		}
	}
}

func TestReplacePin(t *testing.T) {
	in := "packages:\n  - deb: libc6=2.36-9+deb12u13  # why\n    why: c\n  - deb: \"zlib1g=1:1.2.13.dfsg-1\"\n"
	out, n := replacePin(in, "libc6", "2.36-9+deb12u13", "2.36-9+deb12u14")
	if n != 1 || !strings.Contains(out, "- deb: libc6=2.36-9+deb12u14  # why\n") {
		t.Errorf("libc6: %d, %q", n, out)
	}
	out, n = replacePin(out, "zlib1g", "1:1.2.13.dfsg-1", "1:1.2.13.dfsg-1+deb12u1")
	if n != 1 || !strings.Contains(out, `- deb: "zlib1g=1:1.2.13.dfsg-1+deb12u1"`) {
		t.Errorf("zlib1g: %d, %q", n, out)
	}
	if _, n := replacePin(in, "libc", "2.36-9+deb12u13", "x"); n != 0 {
		t.Error("a pin of another package's prefix was replaced")
	}
}

// fakeApt puts an apt-get on PATH that knows no version of anything and
// records each `apt-get update`.
func fakeApt(t *testing.T) (runner, string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "updates")
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		"update) echo update >> " + log + "; exit 0;;\n" +
		"download) echo \"E: Version '${3#*=}' for '${3%%=*}' was not found\" >&2; exit 100;;\n" +
		"esac\nexit 2\n"
	if err := os.WriteFile(filepath.Join(dir, "apt-get"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return runner{timeout: time.Minute, env: []string{"PATH=" + dir + ":/usr/bin:/bin"}}, log
}

func TestStalePinNamesPackageAndFix(t *testing.T) {
	r, log := fakeApt(t)
	c := &debCache{dir: t.TempDir(), run: r}
	for range 2 {
		_, err := c.Fetch(context.Background(), Package{Deb: "dash=0.0.1-1", Why: "sh"})
		if !errors.Is(err, ErrPinNotInArchive) {
			t.Fatalf("err = %v, want ErrPinNotInArchive", err)
		}
		for _, want := range []string{"package dash", "make images-update-pins", "was not found"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
	}
	updates, err := os.ReadFile(log)
	if err != nil || strings.Count(string(updates), "update") != 1 {
		t.Errorf("apt-get update ran %q times (%v), want once per build", updates, err)
	}
}

// A cached package is used without asking the archive, which keeps an
// image buildable after the archive drops its version.
func TestCachedPackageNeedsNoArchive(t *testing.T) {
	r, _ := fakeApt(t)
	c := &debCache{dir: t.TempDir(), run: r}
	p := Package{Deb: "dash=0.5.12-2", Why: "sh"}
	if err := os.MkdirAll(filepath.Dir(c.Path(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Path(p), []byte("deb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Fetch(context.Background(), p); err != nil || got != c.Path(p) {
		t.Fatalf("Fetch = %q, %v", got, err)
	}
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Fatal("imagebuild needs dpkg-deb (Debian's dpkg package)")
	}
}

// TestCopyrightTravels: a package's copyright file is copied whether the
// package is taken whole (its other docs dropped) or only for the paths it
// keeps.
func TestCopyrightTravels(t *testing.T) {
	src := t.TempDir()
	for _, f := range []string{
		"usr/bin/tool", "usr/lib/libtool.so",
		"usr/share/doc/tool/copyright", "usr/share/doc/tool/changelog.gz",
		"usr/share/man/man1/tool.1.gz",
	} {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		pkg       Package
		want, not []string
	}{
		"whole":   {Package{Deb: "tool=1.0-1"}, []string{"usr/bin/tool", "usr/lib/libtool.so", "usr/share/doc/tool/copyright"}, []string{"usr/share/doc/tool/changelog.gz", "usr/share/man"}},
		"kept":    {Package{Deb: "tool=1.0-1", Keep: []string{"/usr/bin/tool"}}, []string{"usr/bin/tool", "usr/share/doc/tool/copyright"}, []string{"usr/lib/libtool.so", "usr/share/doc/tool/changelog.gz"}},
		"another": {Package{Deb: "other=1.0-1", Keep: []string{"/usr/bin/tool"}}, []string{"usr/bin/tool"}, []string{"usr/share/doc"}},
	} {
		t.Run(name, func(t *testing.T) {
			dst := t.TempDir()
			if err := copyPackage(src, dst, c.pkg); err != nil {
				t.Fatal(err)
			}
			for _, f := range c.want {
				if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
					t.Errorf("%s not copied: %v", f, err)
				}
			}
			for _, f := range c.not {
				if _, err := os.Lstat(filepath.Join(dst, f)); err == nil {
					t.Errorf("%s copied", f)
				}
			}
		})
	}
}
