package configfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// A hostile tree is built from the fuzz input by a small program of
// operations, each of them:
//
//	kind, base, n, n path elements, payload
//
// kind picks the operation (opKinds), base one of treeBases (the
// directories where nvmet objects live, so that mutations land where Read
// looks), and each path element is either an entry of treeNames or, for
// a byte past its end, a raw name taken from the input (one length byte,
// then the bytes). The payload is the file's content (one length byte,
// then the bytes), the symlink's target (one byte: an entry of
// treeTargets or a raw string), or the sparse file's size (one byte: a
// power of two from 64 KiB to 8 MiB).
//
// The skeleton nvmet/{subsystems,ports,hosts} always exists and is never
// replaced: nvmet creates those groups when it is loaded and configfs
// refuses to remove or rename them, so no tool can make them anything
// else. Everything under them is what other tools, or a fixture, may have
// made.
type treeOp struct {
	kind    byte
	base    byte
	path    []string
	content string
	size    int64
}

const (
	opDir     = iota // mkdir -p
	opFile           // a regular file with the payload as content
	opValue          // a regular file with a value from treeValues
	opSymlink        // a symlink to a target from treeTargets or a raw one
	opFIFO           // a named pipe: opening it for reading blocks
	opSparse         // a sparse regular file of 64 KiB << n bytes
	opRemove         // rm -rf, never of the skeleton
	numOpKinds
)

const (
	fuzzNQN  = "nqn.2014-08.org.example:a"
	fuzzNQN2 = "nqn.2014-08.org.example:b"
	fuzzHost = "nqn.2014-08.org.example:host"
)

var treeBases = []string{
	"nvmet",
	"nvmet/subsystems/" + fuzzNQN,
	"nvmet/subsystems/" + fuzzNQN + "/namespaces/1",
	"nvmet/subsystems/" + fuzzNQN + "/allowed_hosts",
	"nvmet/ports/1",
	"nvmet/ports/1/subsystems",
	"nvmet/ports/1/referrals/r",
	"nvmet/ports/1/ana_groups/1",
	"nvmet/hosts/" + fuzzHost,
	"nvmet/subsystems/" + fuzzNQN2,
	"nvmet/ports/0x10",
}

var treeNames = []string{
	"subsystems", "ports", "hosts", "namespaces", "allowed_hosts", "referrals", "ana_groups",
	fuzzNQN, fuzzNQN2, fuzzHost, "1", "2", "010", "0x10", "65536", "+1", "x",
	"attr_allow_any_host", "attr_version", "attr_serial", "attr_model", "attr_cntlid_min",
	"attr_cntlid_max", "attr_qid_max", "attr_pi_enable", "device_path", "device_uuid",
	"device_nguid", "ana_grpid", "buffered_io", "enable", "addr_trtype", "addr_adrfam",
	"addr_traddr", "addr_trsvcid", "addr_treq", "addr_portid", "param_inline_data_size",
	"param_pi_enable", "ana_state", "dhchap_hash", "dhchap_dhgroup", ".", "..",
}

// treeTargets are symlink targets; "@outside" is the absolute path of a
// directory next to the root that Read must never read. The corpus in
// testdata/fuzz/FuzzRead refers to these tables by index: append only.
var treeTargets = []string{
	"../../../../nvmet/subsystems/" + fuzzNQN, "../../../../nvmet/hosts/" + fuzzHost,
	"../..", "../../../..", "../../../../..", "../../../../../outside", "@outside", "@outside/attr_model",
	"@outside/namespaces", "/", "/dev/zero", "/proc/self/root", "nowhere", "", "../../../../outside",
}

var treeValues = []string{
	"1\n", "0\n", "\n", "", "(null)\n", "tcp\n", "ipv4\n", "ipv6\n", "127.0.0.1\n", "::ffff:1.2.3.4\n",
	"4420\n", "04420\n", "-1\n", "65519\n", "65536\n", "1.3\n", "optimized\n", "/dev/loop0\n",
	"b4a5c6d7-0000-4000-8000-00000000000a\n", "00000000-0000-0000-0000-000000000000\n", "x\x00y\n",
}

// outsideSecret is in every file of the outside directory; no string Read
// returns may contain it.
const outsideSecret = "OUTSIDE-ROOT"

// decodeTree turns fuzz input into at most 48 operations; it never fails,
// it stops where the input runs out.
func decodeTree(b []byte) []treeOp {
	next := func() (byte, bool) {
		if len(b) == 0 {
			return 0, false
		}
		c := b[0]
		b = b[1:]
		return c, true
	}
	raw := func() string {
		n, _ := next()
		n %= 64
		if int(n) > len(b) {
			n = byte(len(b))
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	var ops []treeOp
	for len(ops) < 48 {
		k, ok := next()
		if !ok {
			break
		}
		op := treeOp{kind: k % numOpKinds}
		base, _ := next()
		op.base = base % byte(len(treeBases))
		n, _ := next()
		for range n % 4 {
			c, ok := next()
			if !ok {
				break
			}
			if int(c) < len(treeNames) {
				op.path = append(op.path, treeNames[c])
			} else {
				op.path = append(op.path, raw())
			}
		}
		switch op.kind {
		case opFile:
			op.content = raw()
		case opValue:
			c, _ := next()
			op.content = treeValues[int(c)%len(treeValues)]
		case opSymlink:
			c, _ := next()
			if int(c) < len(treeTargets) {
				op.content = treeTargets[c]
			} else {
				op.content = raw()
			}
		case opSparse:
			c, _ := next()
			op.size = 64 << 10 << (c % 8) // 64 KiB to 8 MiB, all holes
		}
		ops = append(ops, op)
	}
	return ops
}

// encodeTree is decodeTree's inverse for the seeds; names and targets not
// in the tables are written raw.
func encodeTree(ops ...treeOp) []byte {
	var b []byte
	index := func(list []string, s string) int {
		for i, v := range list {
			if v == s {
				return i
			}
		}
		return -1
	}
	raw := func(s string) {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	for _, op := range ops {
		b = append(b, op.kind, op.base, byte(len(op.path)))
		for _, p := range op.path {
			if i := index(treeNames, p); i >= 0 {
				b = append(b, byte(i))
			} else {
				b = append(b, 255)
				raw(p)
			}
		}
		switch op.kind {
		case opFile:
			raw(op.content)
		case opValue:
			b = append(b, byte(index(treeValues, op.content)))
		case opSymlink:
			if i := index(treeTargets, op.content); i >= 0 {
				b = append(b, byte(i))
			} else {
				b = append(b, 255)
				raw(op.content)
			}
		case opSparse:
			for c := byte(0); c < 8; c++ {
				if 64<<10<<c == op.size {
					b = append(b, c)
				}
			}
		}
	}
	return b
}

func dirOp(base byte, path ...string) treeOp { return treeOp{kind: opDir, base: base, path: path} }
func valueOp(base byte, name, v string) treeOp {
	return treeOp{kind: opValue, base: base, path: []string{name}, content: v}
}
func linkOp(base byte, name, target string) treeOp {
	return treeOp{kind: opSymlink, base: base, path: []string{name}, content: target}
}

// buildTree makes the skeleton, the outside directory and then runs ops
// under root; operations the filesystem refuses (a file where a directory
// is, a name too long) are skipped, as they would be for any tool.
func buildTree(t *testing.T, ops []treeOp) (root, outside string) {
	dir := t.TempDir()
	root, outside = filepath.Join(dir, "root"), filepath.Join(dir, "outside")
	for _, d := range []string{"nvmet/subsystems", "nvmet/ports", "nvmet/hosts"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The outside looks like nvmet objects, so that following a link
	// into it would read plausible values.
	for _, d := range []string{"namespaces/1", "1", "subsystems/" + fuzzNQN, "referrals/r", "ana_groups/1"} {
		if err := os.MkdirAll(filepath.Join(outside, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"attr_model", "attr_serial", "namespaces/1/device_path", "1/ana_state",
		"1/device_path", "addr_traddr", "referrals/r/addr_traddr", "ana_groups/1/ana_state", "dhchap_hash"} {
		if err := os.WriteFile(filepath.Join(outside, f), []byte(outsideSecret+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	skeleton := map[string]bool{"nvmet": true, "nvmet/subsystems": true, "nvmet/ports": true, "nvmet/hosts": true}
	for _, op := range ops {
		rel := filepath.Join(append([]string{treeBases[op.base]}, op.path...)...)
		if rel == "." || strings.HasPrefix(rel, "..") || skeleton[rel] ||
			strings.ContainsRune(rel, 0) || filepath.IsAbs(rel) {
			continue // outside the root, or the skeleton
		}
		p := filepath.Join(root, rel)
		// Never through a symlink, a pipe or a file the tree already
		// has: the tree is hostile to Read, not to the machine running
		// the test (which may be root).
		if !mkdirNoFollow(root, filepath.Dir(rel)) {
			continue
		}
		switch op.kind {
		case opDir:
			mkdirNoFollow(root, rel)
		case opFile, opValue:
			if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
				_, _ = f.WriteString(op.content)
				f.Close()
			}
		case opSymlink:
			target := strings.Replace(op.content, "@outside", outside, 1)
			if !strings.ContainsRune(target, 0) {
				_ = os.Symlink(target, p)
			}
		case opFIFO:
			_ = unix.Mkfifo(p, 0o644)
		case opSparse:
			if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
				_ = f.Truncate(op.size)
				f.Close()
			}
		case opRemove:
			_ = os.RemoveAll(p) // removes a last-element symlink, never follows it
		}
	}
	return root, outside
}

// mkdirNoFollow makes root/rel and its parents, and reports whether it is
// a directory reached through directories only.
func mkdirNoFollow(root, rel string) bool {
	p := root
	for _, c := range strings.Split(rel, "/") {
		if c == "." {
			continue
		}
		p += "/" + c
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			if os.Mkdir(p, 0o755) != nil {
				return false
			}
			continue
		}
		if err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// tracedSys records every directory and attribute the FS opened.
type tracedSys struct {
	sysOps
	mu     sync.Mutex
	opened []string
}

func (s *tracedSys) note(path string) {
	s.mu.Lock()
	s.opened = append(s.opened, path)
	s.mu.Unlock()
}

func (s *tracedSys) readDir(path string) ([]dirEntry, error) {
	ents, err := s.sysOps.readDir(path)
	if err == nil {
		s.note(path)
	}
	return ents, err
}

func (s *tracedSys) readAttr(path string) (string, error) {
	v, err := s.sysOps.readAttr(path)
	if err == nil {
		s.note(path)
	}
	return v, err
}

// resolveCached is filepath.EvalSymlinks with the resolved directories
// kept in cache: the paths Read opens share most of their parents.
func resolveCached(cache map[string]string, p string) (string, bool) {
	if r, ok := cache[p]; ok {
		return r, r != ""
	}
	dir, base := filepath.Split(p)
	parent, ok := resolveCached(cache, filepath.Clean(dir))
	r := ""
	if ok {
		r = filepath.Join(parent, base)
		if fi, err := os.Lstat(r); err != nil {
			r = ""
		} else if fi.Mode()&os.ModeSymlink != 0 {
			r, _ = filepath.EvalSymlinks(r)
		}
	}
	cache[p] = r
	return r, r != ""
}

// readOutcome is what one read of the tree gave.
type readOutcome struct {
	st     *State
	sub    Subsystem
	subOK  bool
	subErr error
	exp    Export
	expOK  bool
	expErr error
	err    error
}

// hostileReadTimeout bounds one Read of a fuzz tree; a Read that blocks
// (on a FIFO, say) is a finding, not a slow input.
const hostileReadTimeout = 10 * time.Second

// checkHostileRead reads the tree Read, ReadSubsystem and ReadExport
// would see and holds them to the properties of FuzzRead.
func checkHostileRead(t *testing.T, root, outside string) {
	t.Helper()
	sys := &tracedSys{sysOps: realSys{}}
	fs := newFS(root, sys)
	ctx := context.Background()
	done := make(chan readOutcome, 1)
	go func() {
		var o readOutcome
		o.st, o.err = fs.Read(ctx)
		o.sub, o.subOK, o.subErr = fs.ReadSubsystem(ctx, fuzzNQN)
		o.exp, o.expOK, o.expErr = fs.ReadExport(ctx, fuzzNQN)
		done <- o
	}()
	var o readOutcome
	select {
	case o = <-done:
	case <-time.After(hostileReadTimeout):
		t.Fatalf("Read of a hostile tree did not return within %v", hostileReadTimeout)
	}

	// Errors are the package's own type.
	for _, err := range []error{o.err, o.subErr, o.expErr} {
		var ce *Error
		if err != nil && !errors.As(err, &ce) {
			t.Fatalf("error %v (%T) is not a *configfs.Error", err, err)
		}
	}

	// Nothing outside the root was opened: every directory and attribute
	// read resolves, symlinks and all, to a path under the root.
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	resolved := map[string]string{root: realRoot}
	for _, p := range sys.opened {
		r, ok := resolveCached(resolved, p)
		if !ok {
			continue // removed since, or a loop: nothing to resolve
		}
		if r != realRoot && !strings.HasPrefix(r, realRoot+"/") {
			t.Fatalf("read %s, which is %s, outside the root %s", p, r, realRoot)
		}
	}
	dump := fmt.Sprintf("%+v %+v %+v", o.st, o.sub, o.exp)
	if strings.Contains(dump, outsideSecret) {
		t.Fatalf("Read returned a value from outside the root: %s", dump)
	}

	// No attribute value is longer than a configfs attribute can be.
	if o.err == nil {
		for _, s := range stateStrings(o.st) {
			if len(s) > maxAttrRead {
				t.Fatalf("Read returned a %d-byte value; a configfs attribute has at most %d", len(s), maxAttrRead)
			}
		}
	}

	// The one-object reads agree with the whole-tree read.
	if o.err == nil && o.subErr == nil {
		want, ok := o.st.Subsystem(fuzzNQN)
		if ok != o.subOK || cmp.Diff(want, o.sub) != "" {
			t.Fatalf("ReadSubsystem = %v %+v; Read has %v %+v", o.subOK, o.sub, ok, want)
		}
	}
	if o.err == nil && o.expErr == nil {
		want, ok := o.st.Export(fuzzNQN)
		if ok != o.expOK || cmp.Diff(want, o.exp) != "" {
			t.Fatalf("ReadExport = %v %+v; State.Export has %v %+v", o.expOK, o.exp, ok, want)
		}
	}
}

// stateStrings returns every string field of st.
func stateStrings(st *State) []string {
	var out []string
	addr := func(a Address) { out = append(out, a.TrType, a.AdrFam, a.TrAddr, a.TrSvcID) }
	for _, s := range st.Subsystems {
		a := s.Attrs
		out = append(out, s.NQN, a.Version, a.Serial, a.Model)
		out = append(out, s.AllowedHosts...)
		for _, ns := range s.Namespaces {
			out = append(out, ns.DevicePath, ns.DeviceUUID, ns.DeviceNGUID)
		}
	}
	for _, p := range st.Ports {
		addr(p.Address)
		out = append(out, p.TReq)
		out = append(out, p.Subsystems...)
		for _, r := range p.Referrals {
			addr(r.Address)
			out = append(out, r.Name, r.TReq)
		}
		for _, g := range p.ANAGroups {
			out = append(out, g.State)
		}
	}
	for _, h := range st.Hosts {
		out = append(out, h.NQN, h.DHCHAPHash, h.DHCHAPDHGroup)
	}
	return out
}

// FuzzRead reads hostile trees: odd names, huge and missing attribute
// files, symlinks pointing anywhere, directories where files belong and
// files where directories belong, named pipes. Read, ReadSubsystem and
// ReadExport never panic, never hang, return only *Error, never open
// anything outside the root, never return a value longer than an
// attribute can be, and agree with each other.
func FuzzRead(f *testing.F) {
	// A well-formed export: subsystem, namespace, host, port, links.
	valid := []treeOp{
		valueOp(1, "attr_allow_any_host", "0\n"), valueOp(1, "attr_version", "1.3\n"),
		valueOp(2, "device_path", "/dev/loop0\n"), valueOp(2, "enable", "1\n"),
		valueOp(2, "device_uuid", "b4a5c6d7-0000-4000-8000-00000000000a\n"),
		dirOp(8), linkOp(3, fuzzHost, "../../../../nvmet/hosts/"+fuzzHost),
		valueOp(4, "addr_trtype", "tcp\n"), valueOp(4, "addr_adrfam", "ipv4\n"),
		valueOp(4, "addr_traddr", "127.0.0.1\n"), valueOp(4, "addr_trsvcid", "4420\n"),
		valueOp(4, "param_inline_data_size", "-1\n"),
		linkOp(5, fuzzNQN, "../../../../nvmet/subsystems/"+fuzzNQN),
		valueOp(6, "addr_portid", "1\n"), valueOp(7, "ana_state", "optimized\n"),
	}
	f.Add(encodeTree(valid...))
	f.Add([]byte{})
	// Each hostile shape on top of the valid tree, replacing what the
	// valid tree has there.
	rm := func(base byte, name string) treeOp { return treeOp{kind: opRemove, base: base, path: []string{name}} }
	for _, ops := range [][]treeOp{
		{rm(1, "namespaces"), linkOp(1, "namespaces", "@outside/namespaces")},          // a group that is a symlink out
		{rm(4, "referrals"), linkOp(4, "referrals", "../../../../outside/referrals/")}, // the same, relative
		{rm(4, "subsystems"), linkOp(4, "subsystems", "@outside/subsystems")},
		{linkOp(0, "subsystems/x", "@outside")},                                        // an object that is a symlink
		{rm(0, "subsystems/"+fuzzNQN), linkOp(0, "subsystems/"+fuzzNQN, "@outside")},   // the one ReadSubsystem reads
		{linkOp(1, "attr_model", "@outside/attr_model")},                               // an attribute that is a symlink
		{rm(2, "device_path"), linkOp(2, "device_path", "/dev/zero")},                  // an endless attribute
		{rm(2, "device_path"), {kind: opFIFO, base: 2, path: []string{"device_path"}}}, // an attribute that blocks
		{{kind: opSparse, base: 1, path: []string{"attr_serial"}, size: 8 << 20}},      // a huge attribute
		{rm(1, "attr_version"), dirOp(1, "attr_version")},                              // a directory for a file
		{rm(1, "namespaces"), {kind: opFile, base: 1, path: []string{"namespaces"}}},   // a file for a directory
		{rm(2, "device_path")}, // a missing attribute
		{rm(2, "enable"), {kind: opFile, base: 2, path: []string{"enable"}, content: "1\n\n"}},
		{dirOp(0, "ports", "010")},       // an octal port name
		{dirOp(0, "ports", "65536")},     // a port ID out of range
		{dirOp(0, "subsystems", "\n\t")}, // an odd subsystem name
		{linkOp(5, "loop", "loop")},      // a link to itself
		{linkOp(3, "h", "../../../../nvmet/hosts/"+fuzzHost+"/..")},
	} {
		f.Add(encodeTree(append(valid[:len(valid):len(valid)], ops...)...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		root, outside := buildTree(t, decodeTree(b))
		checkHostileRead(t, root, outside)
	})
}

func TestDecodeTreeInvertsEncode(t *testing.T) {
	ops := []treeOp{
		valueOp(1, "attr_model", "1.3\n"), linkOp(5, "raw name", "raw target"),
		{kind: opSparse, base: 2, path: []string{"device_path"}, size: 1 << 20},
		{kind: opFile, base: 3, path: []string{"a", "b"}, content: "c"},
		{kind: opFIFO, base: 4},
	}
	got := decodeTree(encodeTree(ops...))
	if diff := cmp.Diff(ops, got, cmp.AllowUnexported(treeOp{})); diff != "" {
		t.Fatalf("decodeTree(encodeTree(ops)) (-want +got):\n%s", diff)
	}
}

// The regression tests of FuzzRead's findings; each input is also in
// testdata/fuzz/FuzzRead under the name given.

// hostileTree is the well-formed tree of loadTree's basic fixture with
// the outside directory next to it.
func hostileTree(t *testing.T) (root, outside string) {
	t.Helper()
	root = loadTree(t, "basic.tree")
	outside = filepath.Join(t.TempDir(), "outside")
	if err := os.MkdirAll(filepath.Join(outside, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "1", "device_path"), []byte(outsideSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

// readWithin runs Read and fails the test if it blocks.
func readWithin(t *testing.T, fs *FS) (*State, error) {
	t.Helper()
	type result struct {
		st  *State
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := fs.Read(context.Background())
		done <- result{st, err}
	}()
	select {
	case r := <-done:
		return r.st, r.err
	case <-time.After(hostileReadTimeout):
		t.Fatalf("Read did not return within %v", hostileReadTimeout)
		return nil, nil
	}
}

// fifo-attribute: a named pipe where an attribute belongs blocked Read
// for ever in open(2). Only regular files are attributes now, and opens
// never block.
func TestReadSkipsNamedPipe(t *testing.T) {
	root, _ := hostileTree(t)
	p := filepath.Join(root, "nvmet/subsystems", disk1, "namespaces/1/device_path")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := readWithin(t, NewFS(root))
	if err != nil {
		t.Fatal(err)
	}
	if sub, _ := st.Subsystem(disk1); len(sub.Namespaces) == 0 || sub.Namespaces[0].DevicePath != "" {
		t.Errorf("namespaces %+v, want namespace 1 without a device path", sub.Namespaces)
	}
	// Apply reads attributes by name, without a listing: that open does
	// not block either (a pipe without a writer reads as empty).
	done := make(chan string, 1)
	go func() { v, _ := (realSys{}).readAttr(p); done <- v }()
	select {
	case v := <-done:
		if v != "" {
			t.Errorf("readAttr of a pipe = %q", v)
		}
	case <-time.After(hostileReadTimeout):
		t.Fatalf("readAttr of a pipe did not return within %v", hostileReadTimeout)
	}
}

// group-symlink-outside: a group (here a port's subsystems/) that was a
// symlink to a directory outside the root was followed, and Read reported
// what it found there. Now no open follows a symlink (O_NOFOLLOW): the
// group is an error naming it (ENOTDIR, as open(2) reports a symlink
// opened with O_DIRECTORY|O_NOFOLLOW), and nothing outside is read.
func TestReadNeverFollowsSymlinks(t *testing.T) {
	root, outside := hostileTree(t)
	ns := filepath.Join(root, "nvmet/subsystems", disk1, "namespaces")
	if err := os.RemoveAll(ns); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, ns); err != nil {
		t.Fatal(err)
	}
	st, err := readWithin(t, NewFS(root))
	var ce *Error
	if !errors.As(err, &ce) || !errors.Is(err, unix.ENOTDIR) || ce.Path != ns {
		t.Fatalf("Read = %+v, %v; want an ENOTDIR *Error naming %s", st, err, ns)
	}

	// An object that is a symlink is no object: not listed by Read, and
	// absent for ReadSubsystem, even when it points at a real one.
	root, _ = hostileTree(t)
	link := filepath.Join(root, "nvmet/subsystems", "nqn.2014-08.org.example:alias")
	if err := os.Symlink(filepath.Join(root, "nvmet/subsystems", disk1), link); err != nil {
		t.Fatal(err)
	}
	fs := NewFS(root)
	if st, err := readWithin(t, fs); err != nil || len(st.Subsystems) != 2 {
		t.Errorf("Read = %v subsystems, %v; want the 2 real ones", len(st.Subsystems), err)
	}
	if _, ok, err := fs.ReadSubsystem(context.Background(), filepath.Base(link)); ok || err != nil {
		t.Errorf("ReadSubsystem of a symlink = %v, %v; want absent", ok, err)
	}
}

// huge-attribute: a large attribute file (sparse, so it cost nothing to
// make) was read whole into memory and returned. configfs shows at most a
// page; more is an EFBIG error naming the file.
func TestReadRefusesOversizedAttribute(t *testing.T) {
	root, _ := hostileTree(t)
	p := filepath.Join(root, "nvmet/subsystems", disk1, "attr_model")
	if err := os.Truncate(p, 1<<30); err != nil {
		t.Fatal(err)
	}
	_, err := readWithin(t, NewFS(root))
	var ce *Error
	if !errors.As(err, &ce) || !errors.Is(err, unix.EFBIG) || ce.Path != p {
		t.Fatalf("Read = %v; want an EFBIG *Error naming %s", err, p)
	}
	// One page exactly is still an attribute.
	if err := os.WriteFile(p, []byte(strings.Repeat("m", maxAttrRead)), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := (realSys{}).readAttr(p); err != nil || len(v) != maxAttrRead {
		t.Errorf("readAttr of %d bytes = %d bytes, %v", maxAttrRead, len(v), err)
	}
}
