package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBusyboxImageIsADockerArchive(t *testing.T) {
	dir := t.TempDir()
	bb := filepath.Join(dir, "busybox")
	if err := os.WriteFile(bb, []byte("#!fake busybox\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	if err := writeBusyboxImage(out, bb, []string{"bin/sh", "/usr/bin/head", "bin/sh"}, []string{"example.com/x:1"}, []string{"/bin/sh"}); err != nil {
		t.Fatal(err)
	}
	refs, err := imageRefs(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(refs, []string{"example.com/x:1"}) {
		t.Fatalf("refs = %v", refs)
	}
	// The same input gives the same bytes: nothing time- or host-dependent.
	again := filepath.Join(dir, "again.tar")
	if err := writeBusyboxImage(again, bb, []string{"bin/sh", "/usr/bin/head", "bin/sh"}, []string{"example.com/x:1"}, []string{"/bin/sh"}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Error("two builds of the same image differ")
	}

	// The manifest names a config and a layer that are in the archive.
	_, files := archiveEntries(t, out)
	var m []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	if files[m[0].Config] == nil || len(m[0].Layers) != 1 || files[m[0].Layers[0]] == nil {
		t.Fatalf("manifest names missing files: %+v (have %d files)", m[0], len(files))
	}

	// Each applet is a symlink to /bin/busybox at its path, once.
	links := map[string]int{}
	headers, _ := tarEntries(t, bytes.NewReader(files[m[0].Layers[0]]))
	for _, h := range headers {
		if h.Typeflag == tar.TypeSymlink {
			if h.Linkname != "/bin/busybox" {
				t.Errorf("%s links to %q", h.Name, h.Linkname)
			}
			links[h.Name]++
		}
	}
	if want := map[string]int{"bin/sh": 1, "usr/bin/head": 1}; !reflect.DeepEqual(links, want) {
		t.Errorf("applet links %v, want %v", links, want)
	}
}

// TestBusyboxImageExtraFile: an extra file lands in the layer as an
// executable at its path, next to the applets, and the entrypoint names it.
func TestBusyboxImageExtraFile(t *testing.T) {
	dir := t.TempDir()
	bb := filepath.Join(dir, "busybox")
	agn := filepath.Join(dir, "agnhost")
	for f, body := range map[string]string{bb: "#!fake busybox\n", agn: "#!fake agnhost\n"} {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "img.tar")
	if err := writeBusyboxImage(out, bb, []string{"bin/sh"}, []string{"example.com/agnhost:1"}, []string{"/agnhost"}, imageFile{name: "/agnhost", src: agn}); err != nil {
		t.Fatal(err)
	}
	_, files := archiveEntries(t, out)
	var m []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 || len(m[0].Layers) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	var cfg struct{ Config struct{ Entrypoint []string } }
	if err := json.Unmarshal(files[m[0].Config], &cfg); err != nil || !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"/agnhost"}) {
		t.Fatalf("config %s: %v", files[m[0].Config], err)
	}
	headers, bodies := tarEntries(t, bytes.NewReader(files[m[0].Layers[0]]))
	found := false
	for _, h := range headers {
		if h.Name != "agnhost" {
			continue
		}
		body := bodies[h.Name]
		if h.Typeflag != tar.TypeReg || h.Mode != 0o755 || string(body) != "#!fake agnhost\n" {
			t.Fatalf("agnhost in the layer: type %c mode %o body %q", h.Typeflag, h.Mode, body)
		}
		found = true
	}
	if !found {
		t.Fatal("no agnhost in the layer")
	}
}

func TestImageRefsOCILayout(t *testing.T) {
	out := filepath.Join(t.TempDir(), "oci.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	index := []byte(`{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"ghcr.io/pillar-csi/pause:v1"}}]}`)
	tw.WriteHeader(&tar.Header{Name: "index.json", Mode: 0o644, Size: int64(len(index))})
	tw.Write(index)
	tw.Close()
	f.Close()
	refs, err := imageRefs(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(refs, []string{"ghcr.io/pillar-csi/pause:v1"}) {
		t.Fatalf("refs = %v", refs)
	}
}

// A host tool comes with its ELF interpreter and the libraries it loads,
// each once, at the paths the host has them; the tool itself lands at
// its path in the image.
func TestHostToolFiles(t *testing.T) {
	files, err := hostToolFiles(map[string]string{"/usr/bin/dd": "/usr/bin/dd", "/bin/sh": "/bin/dash"})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, f := range files {
		names[f.name]++
		want := f.name
		if f.name == "/bin/sh" {
			want = "/bin/dash"
		}
		if f.src != want {
			t.Errorf("%s copied from %s, want %s", f.name, f.src, want)
		}
	}
	interp := ""
	for n, c := range names {
		if c != 1 {
			t.Errorf("%s listed %d times", n, c)
		}
		if strings.Contains(n, "ld-linux") {
			interp = n
		}
	}
	if names["/usr/bin/dd"] != 1 || names["/bin/sh"] != 1 || names["/bin/dash"] != 0 || interp == "" {
		t.Errorf("files %v: want /usr/bin/dd, /bin/sh and their interpreter", names)
	}
	libc := false
	for n := range names {
		libc = libc || filepath.Base(n) == "libc.so.6"
	}
	if !libc {
		t.Errorf("files %v: want libc.so.6", names)
	}
	if _, err := hostToolFiles(map[string]string{"/x": filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Error("a missing tool gave no error")
	}
}

// The glibc stand-in's shell runs GNU dd: a pipeline through its
// /bin/sh writes with oflag=nocache, which busybox's shell (it runs its
// own dd whatever PATH says) refuses. The image's layer is unpacked and
// run in a chroot, which needs root, and the host's busybox-static, which
// the kernel lab's provisioning installs (.ci/run installs it before make
// check, so that CI always runs this).
func TestGlibcStandInShellRunsGNUdd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	if _, err := os.Stat(hostBusybox); err != nil {
		t.Skipf("%v: package busybox-static, which the kernel lab installs when it provisions", err)
	}
	ctx := context.Background()
	applets, err := busyboxApplets(ctx, hostBusybox)
	if err != nil {
		t.Fatal(err)
	}
	files, err := hostToolFiles(GlibcStandInTools)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		extra []imageFile
		ok    bool
	}{{"busybox", nil, false}, {"glibc", files, true}} {
		archive := filepath.Join(dir, tc.name+".tar")
		if err := writeBusyboxImage(archive, hostBusybox, applets, []string{"example.com/" + tc.name + ":1"}, []string{"/bin/sh"}, tc.extra...); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(dir, tc.name)
		unpackLayer(t, archive, root)
		out, err := exec.Command("chroot", root, "/bin/sh", "-c", "echo written | dd of=/tmp/out oflag=nocache bs=512 count=1 && cat /tmp/out").CombinedOutput()
		if tc.ok && (err != nil || !strings.Contains(string(out), "written")) {
			t.Errorf("%s image: dd oflag=nocache under its shell: %v\n%s", tc.name, err, out)
		}
		if !tc.ok && err == nil {
			t.Errorf("%s image: dd oflag=nocache succeeded; the stand-in's reason to exist is gone:\n%s", tc.name, out)
		}
	}
}

// unpackLayer writes the directories, files and symlinks of the one layer
// of a docker-archive under root.
func unpackLayer(t *testing.T, archive, root string) {
	t.Helper()
	headers, bodies := layerEntries(t, archive)
	for _, h := range headers {
		path := filepath.Join(root, h.Name)
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, os.FileMode(h.Mode).Perm())
		case tar.TypeReg:
			err = os.WriteFile(path, bodies[h.Name], os.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, path)
		default:
			t.Fatalf("%s: entry type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Extra files in directories the image does not have get those
// directories, before the file and once each.
func TestBusyboxImageExtraFileDirectories(t *testing.T) {
	dir := t.TempDir()
	bb := filepath.Join(dir, "busybox")
	lib := filepath.Join(dir, "lib")
	for _, f := range []string{bb, lib} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "img.tar")
	err := writeBusyboxImage(out, bb, nil, []string{"example.com/glibc:1"}, []string{"/bin/sh"},
		imageFile{name: "/lib/x86_64-linux-gnu/libc.so.6", src: lib}, imageFile{name: "/lib/x86_64-linux-gnu/libm.so.6", src: lib}, imageFile{name: "/usr/bin/dd", src: lib})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, h := range layerHeaders(t, out) {
		order = append(order, h.Name)
	}
	want := []string{"lib/", "lib/x86_64-linux-gnu/", "lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libm.so.6", "usr/bin/dd"}
	got := strings.Join(order, " ")
	if !strings.Contains(got, strings.Join(want, " ")) || strings.Count(got, "usr/bin/ ") != 1 {
		t.Errorf("layer %s, want the run %s and usr/bin/ once", got, strings.Join(want, " "))
	}
}

// layerHeaders reads the headers of the one layer of a docker-archive.
func layerHeaders(t *testing.T, archive string) []*tar.Header {
	t.Helper()
	headers, _ := layerEntries(t, archive)
	return headers
}

// layerEntries reads the one layer of a docker-archive with tarEntries.
func layerEntries(t *testing.T, archive string) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	_, files := archiveEntries(t, archive)
	var m []struct{ Layers []string }
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 || len(m[0].Layers) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	return tarEntries(t, bytes.NewReader(files[m[0].Layers[0]]))
}

// archiveEntries reads the tar file at path with tarEntries.
func archiveEntries(t *testing.T, path string) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return tarEntries(t, f)
}

// tarEntries reads a tar stream: its headers in order, and each entry's
// content by name.
func tarEntries(t *testing.T, r io.Reader) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	var headers []*tar.Header
	bodies := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return headers, bodies
		}
		if err != nil {
			t.Fatal(err)
		}
		headers = append(headers, h)
		if bodies[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}
