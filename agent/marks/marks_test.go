package marks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/fencing"
)

const (
	uidOld = "5a0c5b1e-1111-4c3e-9a39-000000000001"
	uidNew = "5a0c5b1e-1111-4c3e-9a39-000000000002"
	uidX   = "5a0c5b1e-1111-4c3e-9a39-000000000003"
)

func open(t *testing.T, dir string) *fencing.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := fencing.Open(ctx, dir, fencing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// run parses args as the command line after "marks" and runs it.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	o, err := ParseArgs(args, io.Discard)
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v", args, err)
	}
	var out bytes.Buffer
	err = Run(context.Background(), o, &out)
	return out.String(), err
}

func mustContain(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func fileOf(t *testing.T, s *fencing.Store, id string) string {
	t.Helper()
	name, err := fencing.FileName(id)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(s.Dir(), name)
}

func corrupt(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0x01
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Options
	}{
		{[]string{"list"}, Options{Command: "list", Dir: fencing.DefaultDir, LockTimeout: DefaultLockTimeout}},
		{[]string{"show", "pvc-1", "-o", "json", "-generations-dir", "/d"}, Options{Command: "show", Dir: "/d", Volume: "pvc-1", JSON: true, LockTimeout: DefaultLockTimeout}},
		{[]string{"show", "--", "-odd"}, Options{Command: "show", Dir: fencing.DefaultDir, Volume: "-odd", LockTimeout: DefaultLockTimeout}},
		{[]string{"retire", "-grace", "720h", "-keep", "a", "-keep", "b", "-yes"}, Options{Command: "retire", Dir: fencing.DefaultDir, Grace: 720 * time.Hour, Keep: []string{"a", "b"}, Yes: true, LockTimeout: DefaultLockTimeout}},
		{[]string{"end", "-uid", uidOld, "pvc-1"}, Options{Command: "end", Dir: fencing.DefaultDir, Volume: "pvc-1", UID: uidOld, LockTimeout: DefaultLockTimeout}},
		{[]string{"reset", "pvc-1", "-uid", uidOld, "-generation", "0", "-ended", "-accept-loss", "-lock-timeout", "1s"}, Options{Command: "reset", Dir: fencing.DefaultDir, Volume: "pvc-1", UID: uidOld, Ended: true, AcceptLoss: true, LockTimeout: time.Second}},
		{[]string{"adopt", "-uid", uidOld, "-generation", "7", "-ended", "-yes", "pvc-1"}, Options{Command: "adopt", Dir: fencing.DefaultDir, Volume: "pvc-1", UID: uidOld, Generation: 7, Ended: true, Yes: true, LockTimeout: DefaultLockTimeout}},
		{[]string{"reset-ledger", "-accept-loss", "-yes"}, Options{Command: "reset-ledger", Dir: fencing.DefaultDir, AcceptLoss: true, Yes: true, LockTimeout: DefaultLockTimeout}},
	} {
		got, err := ParseArgs(tc.args, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !reflect.DeepEqual(tc.want, got) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.args, got, tc.want)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "a command is required"},
		{[]string{"switch"}, `unknown command "switch"`},
		{[]string{"show"}, "exactly one VOLUME"},
		{[]string{"show", "a", "b"}, "exactly one VOLUME"},
		{[]string{"list", "extra"}, `unexpected argument "extra"`},
		{[]string{"list", "-o", "yaml"}, `-o: "yaml" is neither text nor json`},
		{[]string{"list", "-yes"}, "flag provided but not defined: -yes"},
		{[]string{"retire"}, "-grace: required"},
		{[]string{"retire", "-grace", "-1h"}, "negative"},
		{[]string{"end", "pvc-1"}, "-uid: required"},
		{[]string{"end", "-uid", "has space", "pvc-1"}, "-uid: malformed"},
		{[]string{"reset", "-uid", uidOld, "pvc-1"}, "-generation: required"},
		{[]string{"adopt", "-uid", uidOld, "pvc-1"}, "-generation: required"},
		{[]string{"adopt", "-generation", "3", "pvc-1"}, "-uid: required"},
		{[]string{"adopt", "-uid", uidOld, "-generation", "3", "-accept-loss", "pvc-1"}, "not defined: -accept-loss"},
		{[]string{"end", "-uid", uidOld, "-accept-loss", "pvc-1"}, "not defined: -accept-loss"},
		{[]string{"show", "-generations-dir", "", "pvc-1"}, "-generations-dir: must not be empty"},
		{[]string{"end", "-uid", uidOld, "-lock-timeout", "0s", "pvc-1"}, "-lock-timeout"},
		{[]string{"show", strings.Repeat("x", 129)}, "longer than 128"},
	} {
		if _, err := ParseArgs(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}

	var help bytes.Buffer
	if _, err := ParseArgs([]string{"-h"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, c := range order {
		mustContain(t, "marks -h", help.String(), "\n  "+c+" ")
	}
	help.Reset()
	if _, err := ParseArgs([]string{"reset", "-h"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("reset -h: %v", err)
	}
	mustContain(t, "marks reset -h", help.String(), "-accept-loss", "-ended", "-generation", "-uid", "-yes", "-generations-dir", "publicationGeneration")
}

// TestListAndShow: list and show read every state, in text and JSON, while
// a store holds the directory.
func TestListAndShow(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.Advance(ctx, "pvc-a", fencing.Token{UID: uidOld, Generation: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.End(ctx, "pvc-b", fencing.Token{UID: uidNew, Generation: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, "pvc-c", fencing.Token{UID: uidX, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	corrupt(t, fileOf(t, s, "pvc-c"))

	out, err := run(t, "list", "-generations-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "list", out,
		"VOLUME  STATE       LIFECYCLE                             GENERATION  HISTORY\n",
		"pvc-a   active      "+uidOld+"  7           0\n",
		"pvc-b   ended       "+uidNew+"  2           1\n",
		"pvc-c   unreadable  -",
		"3 marks in "+dir, "unreadable: pvc-c: ", "checksum mismatch", "ledger: 0 retired lifecycles")

	out, err = run(t, "list", "-generations-dir", dir, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var l listOutput
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, out)
	}
	seven, zero := uint64(7), 0
	if want := (markEntry{VolumeID: "pvc-a", File: fileOf(t, s, "pvc-a"), State: "active", LifecycleUID: uidOld, Generation: &seven, HistoryLength: &zero}); !reflect.DeepEqual(want, l.Marks[0]) {
		t.Errorf("list -o json, pvc-a:\n got %+v\nwant %+v", l.Marks[0], want)
	}
	if len(l.Marks) != 3 || l.Marks[2].State != "unreadable" || !strings.Contains(l.Marks[2].Error, "checksum") {
		t.Errorf("list -o json: %+v", l)
	}

	out, err = run(t, "show", "pvc-b", "-generations-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "show", out, "state:       ended\n", "lifecycle:   "+uidNew, "history:     1 ended lifecycles", "  "+uidNew+"  ended ")
	out, err = run(t, "show", "pvc-c", "-generations-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "show of a damaged mark", out, "state:       unreadable", "MARK_UNREADABLE",
		`read back from the damaged file (unverified):`, `volume pvc-c, active lifecycle "`+uidX+`" at generation 1, 0 ended lifecycles; checksum fails`)
	out, err = run(t, "show", "pvc-c", "-generations-dir", dir, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var sh showOutput
	if err := json.Unmarshal([]byte(out), &sh); err != nil || sh.Unverified == nil || sh.Unverified.LifecycleUID != uidX || sh.Unverified.ChecksumOK {
		t.Errorf("show -o json of a damaged mark: %+v, %v\n%s", sh, err, out)
	}
	out, err = run(t, "show", "pvc-none", "-generations-dir", dir)
	if err != nil || !strings.Contains(out, "state:       none") {
		t.Errorf("show of a volume without a mark: %v\n%s", err, out)
	}
	if _, err := run(t, "list", "-generations-dir", filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("list of a missing directory: %v", err)
	}
}

// TestWritesRefusedWhileLocked: every command that writes refuses while a
// store (the agent) holds the directory, says how to stop it, and writes
// nothing.
func TestWritesRefusedWhileLocked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 3}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(fileOf(t, s, "pvc-1"))
	for _, args := range [][]string{
		{"end", "-uid", uidOld, "-yes", "pvc-1"},
		{"reset", "-uid", uidOld, "-generation", "3", "-accept-loss", "-yes", "pvc-1"},
		{"retire", "-grace", "0s", "-yes"},
		{"reset-ledger", "-accept-loss", "-yes"},
		{"end", "-uid", uidOld, "pvc-1"}, // a dry run takes the lock too
	} {
		_, err := run(t, append(args, "-generations-dir", dir, "-lock-timeout", "100ms")...)
		if !errors.Is(err, fencing.ErrLocked) || !strings.Contains(err.Error(), "stop pillar-agent on this node first") {
			t.Errorf("%q while locked: %v, want ErrLocked and the advice to stop the agent", args, err)
		}
	}
	if m, err := s.Get(ctx, "pvc-1"); err != nil || m.Phase != fencing.PhaseActive {
		t.Fatalf("mark after the refused commands: %v, %v", m, err)
	}
	if after, _ := os.ReadFile(fileOf(t, s, "pvc-1")); !bytes.Equal(before, after) {
		t.Fatal("a refused command changed the mark")
	}
}

// TestEnd: after "end", the ended lifecycle is refused and a new one is
// admitted; a wrong UID is refused; without -yes nothing is written.
func TestEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidNew, Generation: 1}); fencing.RejectionReason(err) != fencing.ReasonLifecycleReplaced {
		t.Fatalf("the new lifecycle before the end: %v", err)
	}
	s.Close()

	_, err := run(t, "end", "-uid", uidNew, "-yes", "-generations-dir", dir, "pvc-1")
	if !errors.Is(err, fencing.ErrRecoveryRefused) || !strings.Contains(err.Error(), `the mark's lifecycle is "`+uidOld+`"`) {
		t.Errorf("end of the wrong UID: %v", err)
	}
	_, err = run(t, "end", "-uid", uidOld, "-yes", "-generations-dir", dir, "pvc-none")
	if !errors.Is(err, fencing.ErrRecoveryRefused) {
		t.Errorf("end on a volume without a mark: %v", err)
	}
	out, err := run(t, "end", "-uid", uidOld, "-generations-dir", dir, "pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "end dry run", out, `volume pvc-1: mark active "`+uidOld+`"@4`,
		`would end lifecycle "`+uidOld+`" at generation 4: the mark would become ended "`+uidOld+`"@4 ended: "`+uidOld+`"`,
		"dry run: nothing was written")
	out, err = run(t, "end", "-uid", uidOld, "-yes", "-generations-dir", dir, "pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "end", out, `ended lifecycle "`+uidOld+`": the mark is now ended "`+uidOld+`"@4`)
	out, err = run(t, "end", "-uid", uidOld, "-yes", "-generations-dir", dir, "pvc-1")
	if err != nil || !strings.Contains(out, "already ended: nothing to do") {
		t.Errorf("second end: %v\n%s", err, out)
	}

	s = open(t, dir)
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 5}); fencing.RejectionReason(err) != fencing.ReasonLifecycleEnded {
		t.Errorf("the ended lifecycle after end: %v, want LIFECYCLE_ENDED", err)
	}
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidNew, Generation: 1}); err != nil {
		t.Errorf("the new lifecycle after end: %v", err)
	}
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 9}); fencing.RejectionReason(err) != fencing.ReasonLifecycleEnded {
		t.Errorf("the ended lifecycle once the new one holds the volume: %v, want LIFECYCLE_ENDED", err)
	}
}

// TestAdoptCommand: adopt writes a lost mark only with -yes, only where no
// mark file exists, and the adopted lifecycle is then fenced as before.
func TestAdoptCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	_, err := run(t, "adopt", "-uid", uidNew, "-generation", "2", "-yes", "-generations-dir", dir, "pvc-1")
	if !errors.Is(err, fencing.ErrRecoveryRefused) || !strings.Contains(err.Error(), "has a mark file") {
		t.Errorf("adopt of a marked volume: %v", err)
	}
	out, err := run(t, "adopt", "-uid", uidNew, "-generation", "3", "-generations-dir", dir, "pvc-lost")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "adopt dry run", out, `volume pvc-lost has no mark; would write the mark active "`+uidNew+`"@3`, "dry run: nothing was written")
	if mf, err := fencing.InspectMark(dir, "pvc-lost"); err == nil && mf.Mark != nil {
		t.Fatalf("the dry run wrote %v", mf.Mark)
	}
	out, err = run(t, "adopt", "-uid", uidNew, "-generation", "3", "-yes", "-generations-dir", dir, "pvc-lost")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "adopt", out, `volume pvc-lost: wrote the mark active "`+uidNew+`"@3`)

	s = open(t, dir)
	if _, err := s.Advance(ctx, "pvc-lost", fencing.Token{UID: uidNew, Generation: 3}); err != nil {
		t.Errorf("the adopted lifecycle: %v", err)
	}
	if _, err := s.Advance(ctx, "pvc-lost", fencing.Token{UID: uidX, Generation: 1}); fencing.RejectionReason(err) != fencing.ReasonLifecycleReplaced {
		t.Errorf("another lifecycle after adopt: %v, want LIFECYCLE_REPLACED", err)
	}
}

// TestReset: a damaged mark is replaced only with -yes and -accept-loss;
// then another lifecycle gets LIFECYCLE_REPLACED and a lower generation
// STALE_GENERATION, and a retired lifecycle is never stated.
func TestReset(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.End(ctx, "pvc-1", fencing.Token{UID: uidX, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 6}); err != nil {
		t.Fatal(err)
	}
	path := fileOf(t, s, "pvc-1")
	damaged := corrupt(t, path)
	s.Close()

	args := []string{"reset", "-generations-dir", dir, "-uid", uidOld, "-generation", "6", "pvc-1"}
	out, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "reset dry run", out, "mark unreadable", "checksum mismatch",
		`lifecycles read back from it, to be written to the ledger as ended: "`+uidX+`"`,
		"did not read back intact", "-accept-loss accepts that",
		`write the mark active "`+uidOld+`"@6`, "dry run: nothing was written")
	out, err = run(t, append(args, "-yes")...)
	if err == nil || !strings.Contains(err.Error(), "-accept-loss is required") {
		t.Fatalf("reset -yes without -accept-loss: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, damaged) {
		t.Fatal("a refused reset changed the mark")
	}
	out, err = run(t, append(args, "-yes", "-accept-loss")...)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "reset", out, "kept the damaged file as "+filepath.Join(dir, fencing.DamagedDir), "wrote 1 lifecycles to the ledger as ended",
		`wrote the mark active "`+uidOld+`"@6`)
	if _, err := run(t, append(args, "-yes", "-accept-loss")...); !errors.Is(err, fencing.ErrRecoveryRefused) {
		t.Errorf("reset of a readable mark: %v", err)
	}

	s = open(t, dir)
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidNew, Generation: 100}); fencing.RejectionReason(err) != fencing.ReasonLifecycleReplaced {
		t.Errorf("another lifecycle after reset: %v, want LIFECYCLE_REPLACED", err)
	}
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 5}); fencing.RejectionReason(err) != fencing.ReasonStaleGeneration {
		t.Errorf("a lower generation after reset: %v, want STALE_GENERATION", err)
	}
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 6}); err != nil {
		t.Errorf("the stated lifecycle at the stated generation: %v", err)
	}

	// A lifecycle the ledger lists as retired is refused.
	if _, err := s.End(ctx, "pvc-2", fencing.Token{UID: uidNew, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retire(ctx, fencing.RetireOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fileOf(t, s, "pvc-2"), []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = run(t, "reset", "-generations-dir", dir, "-uid", uidNew, "-generation", "1", "-accept-loss", "-yes", "pvc-2")
	if !errors.Is(err, fencing.ErrRecoveryRefused) || !strings.Contains(err.Error(), "retired") {
		t.Errorf("reset to a retired lifecycle: %v", err)
	}
}

func TestRetireCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	for _, v := range []string{"pvc-1", "pvc-2"} {
		if _, err := s.End(ctx, v, fencing.Token{UID: uidOld, Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	out, err := run(t, "retire", "-grace", "0s", "-keep", "pvc-2", "-generations-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "retire dry run", out, "would retire 1 tombstones", "\n  pvc-1\n", "dry run: nothing was written")
	if inv, _ := fencing.Inspect(dir); len(inv.Marks) != 2 {
		t.Fatalf("a dry run retired marks: %+v", inv)
	}
	out, err = run(t, "retire", "-grace", "0s", "-keep", "pvc-2", "-yes", "-generations-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "retire", out, "retired 1 tombstones", "\n  pvc-1\n")
	s = open(t, dir)
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 2}); fencing.RejectionReason(err) != fencing.ReasonLifecycleEnded {
		t.Errorf("retired lifecycle: %v, want LIFECYCLE_ENDED", err)
	}
	if m, err := s.Get(ctx, "pvc-2"); err != nil || m == nil {
		t.Errorf("kept tombstone: %v, %v", m, err)
	}
}

func TestResetLedgerCommand(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir)
	if _, err := s.End(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retire(ctx, fencing.RetireOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ledger := filepath.Join(dir, "retired.ledger")
	damaged := corrupt(t, ledger)

	out, err := run(t, "list", "-generations-dir", dir)
	if err != nil || !strings.Contains(out, "ledger: UNREADABLE, pillar-agent cannot start") {
		t.Errorf("list with a damaged ledger: %v\n%s", err, out)
	}
	_, err = run(t, "end", "-uid", uidOld, "-yes", "-generations-dir", dir, "pvc-1")
	if err == nil || !strings.Contains(err.Error(), "reset-ledger") {
		t.Errorf("end with a damaged ledger does not point to reset-ledger: %v", err)
	}
	out, err = run(t, "reset-ledger", "-generations-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "reset-ledger dry run", out, "its header announces 1 retired lifecycles; 1 whole records remain", "dry run: nothing was written")
	if _, err := run(t, "reset-ledger", "-yes", "-generations-dir", dir); err == nil || !strings.Contains(err.Error(), "-accept-loss is required") {
		t.Errorf("reset-ledger -yes without -accept-loss: %v", err)
	}
	if got, _ := os.ReadFile(ledger); !bytes.Equal(got, damaged) {
		t.Fatal("a refused reset-ledger changed the ledger")
	}
	out, err = run(t, "reset-ledger", "-yes", "-accept-loss", "-generations-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "reset-ledger", out, "kept the damaged file as ", "wrote a ledger of 1 records")
	s = open(t, dir)
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 2}); fencing.RejectionReason(err) != fencing.ReasonLifecycleEnded {
		t.Errorf("the retired lifecycle after reset-ledger: %v, want LIFECYCLE_ENDED", err)
	}
}

// TestWritesNeedAnExistingDirectory: a mistyped -generations-dir is an
// error, not an empty store created on the spot.
func TestWritesNeedAnExistingDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"end", "-uid", uidOld, "-yes", "pvc-1"},
		{"retire", "-grace", "1h", "-yes"},
		{"reset-ledger", "-accept-loss", "-yes"},
	} {
		if _, err := run(t, append(args, "-generations-dir", missing)...); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q: %v", args, err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the directory was created")
	}
}
