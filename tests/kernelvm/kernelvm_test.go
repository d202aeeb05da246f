package kernelvm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

const modulesDep = `kernel/lib/libcrc32c.ko:
kernel/crypto/crc32c_generic.ko:
kernel/drivers/nvme/target/nvmet.ko: kernel/drivers/nvme/common/nvme-common.ko kernel/lib/libcrc32c.ko
kernel/drivers/nvme/target/nvmet-tcp.ko: kernel/drivers/nvme/target/nvmet.ko kernel/drivers/nvme/common/nvme-common.ko kernel/lib/libcrc32c.ko
kernel/drivers/nvme/common/nvme-common.ko:
extra/zfs/zfs.ko: extra/zfs/spl.ko
extra/zfs/spl.ko:
`

const modulesBuiltin = `kernel/drivers/virtio/virtio_pci.ko
`

func TestLoadOrder(t *testing.T) {
	ix, err := parseModules(strings.NewReader(modulesDep), strings.NewReader(modulesBuiltin))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ix.loadOrder([]string{"crc32c_generic", "virtio_pci", "nvmet-tcp", "nvmet", "zfs"})
	if err != nil {
		t.Fatal(err)
	}
	want := "crc32c_generic nvme_common libcrc32c nvmet nvmet_tcp spl zfs"
	if strings.Join(got, " ") != want {
		t.Fatalf("load order %v, want %s", got, want)
	}
	if p := ix.path["nvmet_tcp"]; p != "kernel/drivers/nvme/target/nvmet-tcp.ko" {
		t.Errorf("path of nvmet_tcp = %q", p)
	}
	if _, err := ix.loadOrder([]string{"nvmet", "no-such-module"}); !errors.Is(err, errNotFound) || !strings.Contains(err.Error(), "no_such_module") {
		t.Errorf("unknown module: err = %v, want one naming it", err)
	}
}

// readNewc parses a newc archive: the names, modes and contents in order.
func readNewc(t *testing.T, b []byte) (names []string, modes []uint32, data map[string]string, rdev map[string][2]uint32) {
	t.Helper()
	data, rdev = map[string]string{}, map[string][2]uint32{}
	field := func(h []byte, i int) uint32 {
		v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("bad header field %d: %v", i, err)
		}
		return uint32(v)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	off := 0
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		h := b[off : off+110]
		mode, size, namesize := field(h, 1), int(field(h, 6)), int(field(h, 11))
		name := string(b[off+110 : off+110+namesize-1])
		off = align(off + 110 + namesize)
		if name == "TRAILER!!!" {
			return
		}
		names = append(names, name)
		modes = append(modes, mode)
		data[name] = string(b[off : off+size])
		rdev[name] = [2]uint32{field(h, 9), field(h, 10)}
		off = align(off + size)
	}
}

func TestCPIO(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "lib", "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "init"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lib", "modules", "x.ko"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(dir, "sh")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	c.dir("dev", 0o755)
	c.charDev("dev/console", 0o600, 5, 1)
	if err := c.tree(dir); err != nil {
		t.Fatal(err)
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d not 4-aligned", buf.Len())
	}
	names, modes, data, rdev := readNewc(t, buf.Bytes())
	if got, want := strings.Join(names, " "), "dev dev/console init lib lib/modules lib/modules/x.ko sh"; got != want {
		t.Fatalf("names %q, want %q", got, want)
	}
	wantModes := []uint32{syscall.S_IFDIR | 0o755, syscall.S_IFCHR | 0o600, syscall.S_IFREG | 0o755, syscall.S_IFDIR | 0o755,
		syscall.S_IFDIR | 0o755, syscall.S_IFREG | 0o644, syscall.S_IFLNK | 0o777}
	for i, m := range modes {
		if m != wantModes[i] {
			t.Errorf("%s: mode %o, want %o", names[i], m, wantModes[i])
		}
	}
	if data["init"] != "#!/bin/sh\n" || data["lib/modules/x.ko"] != "12345" || data["sh"] != "busybox" {
		t.Errorf("contents: %q", data)
	}
	if rdev["dev/console"] != [2]uint32{5, 1} {
		t.Errorf("dev/console rdev %v, want 5:1", rdev["dev/console"])
	}
	// Same inputs, same bytes: the initramfs cache key relies on it.
	var again bytes.Buffer
	c2 := &cpioWriter{w: &again}
	c2.dir("dev", 0o755)
	c2.charDev("dev/console", 0o600, 5, 1)
	c2.tree(dir)
	c2.close()
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("two archives of the same tree differ")
	}
}

func TestParseSources(t *testing.T) {
	st := parseDeb822(`Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Enabled: no
`)
	if len(st) != 1 {
		t.Fatalf("got %d stanzas, want 1 (the disabled one dropped): %v", len(st), st)
	}
	if !st[0].hasComponent("main") || st[0].hasComponent("contrib") || st[0].get("Suites") != "bookworm bookworm-updates" {
		t.Errorf("stanza %v", st[0])
	}
	ol := parseOneLine("# x\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main contrib\ndeb-src http://m.example/debian bookworm main\n")
	if len(ol) != 2 || !ol[0].hasComponent("contrib") || ol[0].get("Signed-By") != "/k.gpg" || ol[0].get("URIs") != "http://m.example/debian" || ol[1].hasType("deb") {
		t.Errorf("one-line sources parsed as %v", ol)
	}
}

func TestHasTag(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		src  string
		want bool
	}{
		"kernel":     {"// Copyright\n\n//go:build kernel\n\npackage x\n", true},
		"kernel-and": {"//go:build linux && kernel\n\npackage x\n", true},
		"not-kernel": {"//go:build !kernel\n\npackage x\n", true}, // mentions the tag
		"other":      {"//go:build linux\n\npackage x\n", false},
		"none":       {"package x\n\n//go:build kernel\n", false}, // after the package clause: not a constraint
	} {
		p := filepath.Join(dir, name+".go")
		if err := os.WriteFile(p, []byte(tc.src), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := hasTag(p, "kernel")
		if err != nil || got != tc.want {
			t.Errorf("%s: hasTag = %v, %v; want %v", name, got, err, tc.want)
		}
	}
}

func TestMatchPackages(t *testing.T) {
	ws := &Workspace{Root: "/w", Modules: []string{"/w/configfs", "/w/tests"}}
	pkgs := []TestPackage{
		{ImportPath: "example.com/p/configfs", Rel: "configfs"},
		{ImportPath: "example.com/p/configfs/nvmet", Rel: "configfs/nvmet"},
		{ImportPath: "example.com/p/tests/kernel/smoke", Rel: "tests/kernel/smoke"},
		{ImportPath: "example.com/p/tests/e2e/cluster", Rel: "tests/e2e/cluster"},
	}
	for _, tc := range []struct {
		patterns []string
		want     string
	}{
		{nil, "configfs configfs/nvmet tests/kernel/smoke"},
		{[]string{"configfs"}, "configfs configfs/nvmet"},
		{[]string{"./tests/kernel/..."}, "tests/kernel/smoke"},
		{[]string{"tests/kernel/smoke", "configfs/nvmet"}, "tests/kernel/smoke configfs/nvmet"},
		{[]string{".../smoke"}, "tests/kernel/smoke"},
		{[]string{"example.com/p/configfs/..."}, "configfs configfs/nvmet"},
		{[]string{"configfs", "configfs/nvmet"}, "configfs configfs/nvmet"},
		// The end-to-end suites run only when named.
		{[]string{"tests/e2e/..."}, "tests/e2e/cluster"},
		{[]string{"tests/e2e/cluster"}, "tests/e2e/cluster"},
	} {
		got, err := MatchPackages(ws, pkgs, tc.patterns)
		if err != nil {
			t.Errorf("%v: %v", tc.patterns, err)
			continue
		}
		var rels []string
		for _, p := range got {
			rels = append(rels, p.Rel)
		}
		if strings.Join(rels, " ") != tc.want {
			t.Errorf("%v: matched %v, want %s", tc.patterns, rels, tc.want)
		}
	}
	if _, err := MatchPackages(ws, pkgs, []string{"agent"}); err == nil {
		t.Error("a pattern that matches nothing must be an error")
	}
}

func TestCommandScript(t *testing.T) {
	s := CommandScript("/work/main/tests", []string{"sh", "-c", "echo 'hi there'; exit 3"})
	if !strings.Contains(s, `exec sh -c 'echo '\''hi there'\''; exit 3'`) || !strings.Contains(s, "cd /work/main/tests") {
		t.Fatalf("script:\n%s", s)
	}
	if runtime.GOOS != "linux" {
		return
	}
	// The quoting must survive a real shell.
	out, err := exec.Command("/bin/sh", "-c", s).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || strings.TrimSpace(string(out)) != "hi there" {
		t.Fatalf("ran script: out %q err %v; want \"hi there\" and status 3", out, err)
	}
}

// A kernel-tagged test run outside the lab must fail loudly, not skip:
// build the smoke suite with the tag and run it on this host.
func TestKernelTestFailsOutsideLab(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a test binary")
	}
	// go test puts its own GOROOT/bin first on the test's PATH.
	cmd := exec.Command("go", "test", "-count=1", "-tags", KernelTag, "-run", "^TestSmoke$", "../kernel/smoke")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("kernel-tagged smoke test on the host: err %v (want a failing exit); output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "real-kernel test: run it with make test-kernel") || !strings.Contains(string(out), "--- FAIL: TestSmoke") {
		t.Fatalf("output does not show RequireGuest's failure:\n%s", out)
	}
}

func TestExposeScript(t *testing.T) {
	got := exposeScript([]string{"/tmp/ci/tests", "/work/main", "/tmp/ci", "/tmp/ci/api", "/tmpfoo"})
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one overlay (for /tmp/ci, covering its modules), got:\n%s", got)
	}
	if !strings.Contains(lines[0], "lowerdir=/run/pillar-lab/host/tmp/ci,") || !strings.HasSuffix(lines[0], "overlay /tmp/ci || exit 125") {
		t.Errorf("overlay line %q", lines[0])
	}
	if exposeScript([]string{"/work/main", "/var/cache/x"}) != "" {
		t.Error("paths the guest does not hide need no overlay")
	}
}

// TestRunTestsRefusesBadOptions: options that cannot work are refused
// before anything is compiled or booted.
func TestRunTestsRefusesBadOptions(t *testing.T) {
	pkgs := []TestPackage{{ImportPath: "example.com/p"}}
	for name, c := range map[string]struct {
		o    TestOptions
		want string
	}{
		"a name that is no shell variable":  {TestOptions{Env: []string{"1X=y"}}, "is not NAME=VALUE"},
		"no value":                          {TestOptions{Env: []string{"X"}}, "is not NAME=VALUE"},
		"a quote in the name":               {TestOptions{Env: []string{"X'Y=1"}}, "is not NAME=VALUE"},
		"host network on a two-guest run":   {TestOptions{HostNet: true, Peer: &PeerOptions{}}, "no host network"},
		"port forward without host network": {TestOptions{Forward: []PortForward{{HostPort: 1, GuestPort: 2}}}, "need the host's network"},
	} {
		t.Run(name, func(t *testing.T) {
			var l Lab
			rep, err := l.RunTests(context.Background(), pkgs, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("RunTests with %+v: error %v (report %+v), want one saying %q", c.o, err, rep, c.want)
			}
		})
	}
}

func TestCopyTree(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "perf")
	files := map[string]string{"perf.md": "| table |", "pics/perf.svg": "<svg/>"}
	for name, body := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	n, err := copyTree(src, dst)
	if err != nil || n != len(files) {
		t.Fatalf("copyTree = %d, %v; want %d files", n, err, len(files))
	}
	for name, body := range files {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != body {
			t.Errorf("%s: %q, %v; want %q", name, b, err, body)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "link")); !os.IsNotExist(err) {
		t.Errorf("a symbolic link was copied: %v", err)
	}
	if n, err := copyTree(filepath.Join(src, "missing"), dst); n != 0 || err != nil {
		t.Errorf("copyTree of a missing directory = %d, %v; want 0, nil", n, err)
	}
}
