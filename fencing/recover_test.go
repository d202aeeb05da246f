package fencing

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const uidD = "6f1c3a52-0d4e-4b8e-9a39-2d7d0a1b0004"

// damage flips one byte of volume id's mark file and returns the damaged
// bytes.
func damage(t *testing.T, s *Store, id string, offset int) []byte {
	t.Helper()
	data, err := os.ReadFile(s.path(id))
	if err != nil {
		t.Fatal(err)
	}
	if offset < 0 {
		offset += len(data)
	}
	data[offset] ^= 0x40
	if err := os.WriteFile(s.path(id), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

func wantRefused(t *testing.T, what string, err error, detail string) {
	t.Helper()
	if !errors.Is(err, ErrRecoveryRefused) || !strings.Contains(err.Error(), detail) {
		t.Errorf("%s: %v, want a refusal saying %q", what, err, detail)
	}
}

func wantReason(t *testing.T, what string, err error, want Reason) {
	t.Helper()
	if got := RejectionReason(err); got != want {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// TestEndLifecycle: ending the lifecycle that holds a volume refused with
// LIFECYCLE_REPLACED admits the new lifecycle by the ordinary rules, and
// the ended one never writes again.
func TestEndLifecycle(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{Now: func() time.Time { return t0 }})
	if _, err := s.Advance(ctx, "pvc-1", tok(uidA, 7)); err != nil {
		t.Fatal(err)
	}
	_, err := s.Advance(ctx, "pvc-1", tok(uidB, 1))
	wantReason(t, "new lifecycle before the end", err, ReasonLifecycleReplaced)

	// Only the mark's own lifecycle can be ended.
	_, err = s.EndLifecycle(ctx, "pvc-1", uidB, false)
	wantRefused(t, "ending another UID", err, `the mark's lifecycle is "`+uidA+`" (active), not "`+uidB+`"`)
	_, err = s.EndLifecycle(ctx, "pvc-none", uidA, false)
	wantRefused(t, "ending on a volume without a mark", err, "no mark")
	if _, err := s.EndLifecycle(ctx, "pvc-1", "bad uid", false); !errors.Is(err, ErrMalformed) {
		t.Errorf("malformed UID: %v", err)
	}

	// A dry run reports the change and writes nothing.
	before, _ := os.ReadFile(s.path("pvc-1"))
	res, err := s.EndLifecycle(ctx, "pvc-1", uidA, true)
	if err != nil || !res.Changed || res.After.Phase != PhaseEnded {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	if after, _ := os.ReadFile(s.path("pvc-1")); !bytes.Equal(before, after) {
		t.Fatal("a dry run changed the mark")
	}

	res, err = s.EndLifecycle(ctx, "pvc-1", uidA, false)
	if err != nil {
		t.Fatal(err)
	}
	want := ended(uidA, 7, uidA)
	if diff := cmp.Diff(want, res.After); diff != "" || !res.Changed {
		t.Fatalf("mark after the end (-want +got):\n%s", diff)
	}
	// Exactly what an accepted End at the mark's generation leaves.
	if d := Decide(active(uidA, 7), KindEnd, tok(uidA, 7), t0, nil); !cmp.Equal(d.Mark, res.After) {
		t.Fatalf("EndLifecycle wrote %v, an accepted End writes %v", res.After, d.Mark)
	}
	// Ending again changes nothing.
	if res, err := s.EndLifecycle(ctx, "pvc-1", uidA, false); err != nil || res.Changed {
		t.Fatalf("second end: %+v, %v", res, err)
	}

	check := func(s *Store) {
		t.Helper()
		_, err := s.Advance(ctx, "pvc-1", tok(uidA, 100))
		wantReason(t, "ended lifecycle mutates", err, ReasonLifecycleEnded)
	}
	check(s)
	if _, err := s.Advance(ctx, "pvc-1", tok(uidB, 1)); err != nil {
		t.Fatalf("new lifecycle after the end: %v", err)
	}
	check(s)
	s.Close()
	check(openTest(t, dir, Options{}))
}

func TestEndLifecycleRefusesUnreadableMark(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	if _, err := s.Advance(ctx, "pvc-1", tok(uidA, 1)); err != nil {
		t.Fatal(err)
	}
	damaged := damage(t, s, "pvc-1", -1)
	_, err := s.EndLifecycle(ctx, "pvc-1", uidA, false)
	wantRefused(t, "ending on an unreadable mark", err, "cannot be read")
	if !errors.Is(err, ErrCorruptMark) {
		t.Errorf("the refusal does not wrap ErrCorruptMark: %v", err)
	}
	if got, _ := os.ReadFile(s.path("pvc-1")); !bytes.Equal(got, damaged) {
		t.Error("the unreadable mark was rewritten")
	}
}

// TestResetMark: a damaged mark is replaced by the stated lifecycle and
// generation; every other lifecycle and every older generation stays
// refused, and what could be read back of the history stays refused after
// the new lifecycle ends.
func TestResetMark(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{Now: func() time.Time { return t0 }})
	// uidA and uidB ended on pvc-1; uidC holds it at generation 5.
	mustWriteMark(t, s, "pvc-1", active(uidC, 5, uidA, uidB))
	damaged := damage(t, s, "pvc-1", -1) // the checksum

	// Refusals that write nothing.
	_, err := s.ResetMark(ctx, "pvc-1", ResetOptions{Token: tok(uidC, 5)})
	wantRefused(t, "without AcceptLoss", err, "accept that loss")
	mustWriteMark(t, s, "pvc-ok", active(uidA, 1))
	_, err = s.ResetMark(ctx, "pvc-ok", ResetOptions{Token: tok(uidB, 1), AcceptLoss: true})
	wantRefused(t, "a readable mark", err, "the mark is readable")
	_, err = s.ResetMark(ctx, "pvc-none", ResetOptions{Token: tok(uidB, 1), AcceptLoss: true})
	wantRefused(t, "no mark file", err, "no mark file")
	// The checksum fails, so a higher generation read back is only a
	// note, not a refusal.
	res, err := s.ResetMark(ctx, "pvc-1", ResetOptions{Token: tok(uidC, 4), DryRun: true})
	if err != nil || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "reads generation 5") {
		t.Fatalf("lower generation with a failed checksum: %+v, %v", res, err)
	}

	res, err = s.ResetMark(ctx, "pvc-1", ResetOptions{Token: tok(uidC, 6), DryRun: true})
	if err != nil || res.Kept != "" || res.Mark.UID != uidC {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	if got, _ := os.ReadFile(s.path("pvc-1")); !bytes.Equal(got, damaged) {
		t.Fatal("a dry run changed the mark")
	}

	res, err = s.ResetMark(ctx, "pvc-1", ResetOptions{Token: tok(uidC, 6), AcceptLoss: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.HistoryIntact || !errors.Is(res.Damage, ErrCorruptMark) {
		t.Errorf("report: intact %v, damage %v", res.HistoryIntact, res.Damage)
	}
	if diff := cmp.Diff([]string{uidA, uidB}, res.Ledgered); diff != "" {
		t.Errorf("lifecycles read back into the ledger (-want +got):\n%s", diff)
	}
	if kept, err := os.ReadFile(res.Kept); err != nil || !bytes.Equal(kept, damaged) {
		t.Fatalf("damaged file not kept as it was at %q: %v", res.Kept, err)
	}
	if filepath.Dir(res.Kept) != filepath.Join(dir, DamagedDir) {
		t.Errorf("kept at %s", res.Kept)
	}

	check := func(s *Store) {
		t.Helper()
		if m, err := s.Get(ctx, "pvc-1"); err != nil || !cmp.Equal(m, active(uidC, 6)) {
			t.Fatalf("mark after the reset: %v, %v", m, err)
		}
		_, err := s.Advance(ctx, "pvc-1", tok(uidD, 9))
		wantReason(t, "another lifecycle", err, ReasonLifecycleReplaced)
		_, err = s.Advance(ctx, "pvc-1", tok(uidC, 5))
		wantReason(t, "a lower generation", err, ReasonStaleGeneration)
		_, err = s.Advance(ctx, "pvc-1", tok(uidA, 9))
		wantReason(t, "a lifecycle read back from the damaged history", err, ReasonLifecycleEnded)
	}
	check(s)
	s.Close()
	s = openTest(t, dir, Options{Now: func() time.Time { return t0 }})
	check(s)

	// The lifecycle goes on, ends, and a new one starts; the read-back
	// lifecycles are still refused after the end, from the ledger.
	if _, err := s.Advance(ctx, "pvc-1", tok(uidC, 6)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.End(ctx, "pvc-1", tok(uidC, 7)); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{uidA, uidB, uidC} {
		_, err := s.Advance(ctx, "pvc-1", tok(u, 100))
		wantReason(t, "ended lifecycle "+u, err, ReasonLifecycleEnded)
	}
	if _, err := s.Advance(ctx, "pvc-1", tok(uidD, 0)); err != nil {
		t.Fatalf("a new lifecycle after the end: %v", err)
	}

	// A lifecycle retired from the volume is never stated as current.
	mustWriteMark(t, s, "pvc-2", ended(uidA, 1, uidA))
	if _, err := s.Retire(ctx, RetireOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("pvc-2"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.ResetMark(ctx, "pvc-2", ResetOptions{Token: tok(uidA, 2), AcceptLoss: true})
	wantRefused(t, "a retired lifecycle", err, "retired")
	if got, _ := os.ReadFile(s.path("pvc-2")); string(got) != "junk" {
		t.Error("the refused reset changed the mark")
	}
}

// TestResetMarkChecksAgainstSalvage: what the damaged file still says is
// used to refuse, never to admit.
func TestResetMarkChecksAgainstSalvage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{Now: func() time.Time { return t0 }})

	// The damaged file says uidA ended: an active mark would reopen it.
	mustWriteMark(t, s, "pvc-ended", ended(uidA, 4, uidB, uidA))
	damage(t, s, "pvc-ended", -1)
	_, err := s.ResetMark(ctx, "pvc-ended", ResetOptions{Token: tok(uidA, 4), AcceptLoss: true})
	wantRefused(t, "reopening an ended lifecycle", err, "records lifecycle \""+uidA+"\" as ended")
	res, err := s.ResetMark(ctx, "pvc-ended", ResetOptions{Token: tok(uidA, 4), AcceptLoss: true, Ended: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ended(uidA, 4, uidA), res.Mark); diff != "" {
		t.Fatalf("tombstone (-want +got):\n%s", diff)
	}
	_, err = s.Advance(ctx, "pvc-ended", tok(uidA, 5))
	wantReason(t, "the ended lifecycle mutates", err, ReasonLifecycleEnded)
	if _, err := s.End(ctx, "pvc-ended", tok(uidA, 5)); err != nil {
		t.Errorf("an End retry of the ended lifecycle: %v", err)
	}
	_, err = s.Advance(ctx, "pvc-ended", tok(uidB, 9))
	wantReason(t, "the lifecycle read back from the history", err, ReasonLifecycleEnded)

	// Another volume's intact mark copied under this volume's name: its
	// checksum matches, but nothing in it is about this volume, so nothing
	// is used and the loss must be accepted.
	mustWriteMark(t, s, "pvc-other", active(uidA, 9))
	data, _ := os.ReadFile(s.path("pvc-other"))
	if err := os.WriteFile(s.path("pvc-3"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.ResetMark(ctx, "pvc-3", ResetOptions{Token: tok(uidB, 1)})
	wantRefused(t, "another volume's file, no AcceptLoss", err, "accept that loss")
	res, err = s.ResetMark(ctx, "pvc-3", ResetOptions{Token: tok(uidB, 1), AcceptLoss: true, DryRun: true})
	if err != nil || len(res.Ledgered) != 0 || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], `names volume "pvc-other"`) {
		t.Fatalf("another volume's file: %+v, %v", res, err)
	}

	// A file of a later format version is not this release's to replace.
	mustWriteMark(t, s, "pvc-v2", active(uidA, 1))
	data, _ = os.ReadFile(s.path("pvc-v2"))
	data[len(markMagic)] = markVersion + 1
	if err := os.WriteFile(s.path("pvc-v2"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.ResetMark(ctx, "pvc-v2", ResetOptions{Token: tok(uidA, 1), AcceptLoss: true})
	wantRefused(t, "a newer format", err, "format version 2")
}

// TestResetMarkIntactHistory: when the checksum matches and the history
// reads whole, nothing is lost and no AcceptLoss is needed; a stated
// generation below the file's is then refused.
func TestResetMarkIntactHistory(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	// A well-formed file whose active lifecycle is also listed as ended:
	// the checksum matches, the invariants do not.
	m := active(uidA, 8, uidB, uidA)
	if err := os.WriteFile(s.path("pvc-1"), rawMark("pvc-1", m), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "pvc-1"); RejectionReason(err) != ReasonMarkUnreadable {
		t.Fatalf("the test file reads: %v", err)
	}
	_, err := s.ResetMark(ctx, "pvc-1", ResetOptions{Token: tok(uidC, 9)})
	if err != nil {
		t.Fatalf("intact history, no AcceptLoss: %v", err)
	}
	_, err = s.Advance(ctx, "pvc-1", tok(uidB, 99))
	wantReason(t, "ended lifecycle", err, ReasonLifecycleEnded)
	_, err = s.Advance(ctx, "pvc-1", tok(uidA, 99))
	wantReason(t, "the damaged file's own lifecycle", err, ReasonLifecycleEnded)

	// The same file stating uidA below its generation 8.
	if err := os.WriteFile(s.path("pvc-2"), rawMark("pvc-2", m), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.ResetMark(ctx, "pvc-2", ResetOptions{Token: tok(uidA, 7), Ended: true})
	wantRefused(t, "a generation below an intact file's", err, "records generation 8")
}

// rawMark encodes m as volume id's mark file without checking it.
func rawMark(id string, m *Mark) []byte { return appendMark(id, m) }

// TestResetLedger: a damaged ledger is replaced by its whole records, so
// every intact one still refuses its lifecycle and the store opens again.
func TestResetLedger(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{Now: func() time.Time { return t0 }})
	vols := []string{"pvc-1", "pvc-2", "pvc-3", "pvc-4"}
	for _, v := range vols {
		if _, err := s.End(ctx, v, tok(uidA, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := s.Retire(ctx, RetireOptions{}); err != nil || len(r) != 4 {
		t.Fatalf("retire: %v, %v", r, err)
	}

	lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := ResetLedger(lctx, dir, LedgerResetOptions{AcceptLoss: true})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("reset while a store holds the directory: %v, want ErrLocked", err)
	}
	s.Close()
	_, err = ResetLedger(ctx, dir, LedgerResetOptions{AcceptLoss: true})
	wantRefused(t, "a readable ledger", err, "readable")

	// Damage one record: the other three must survive.
	path := filepath.Join(dir, ledgerFileName)
	good, _ := os.ReadFile(path)
	bad := bytes.Clone(good)
	bad[ledgerHeaderLen+16*2+5] ^= 0xff
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrCorruptMark) {
		t.Fatalf("Open with the damaged ledger: %v", err)
	}
	inv, err := Inspect(dir)
	if err != nil || !errors.Is(inv.LedgerErr, ErrCorruptMark) {
		t.Fatalf("Inspect does not report the damaged ledger: %+v, %v", inv, err)
	}

	res, err := ResetLedger(ctx, dir, LedgerResetOptions{DryRun: true})
	if err != nil || res.Announced != 4 || res.Kept != 4 || res.KeptPath != "" {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	_, err = ResetLedger(ctx, dir, LedgerResetOptions{})
	wantRefused(t, "without AcceptLoss", err, "accept that loss")
	if got, _ := os.ReadFile(path); !bytes.Equal(got, bad) {
		t.Fatal("a refused reset changed the ledger")
	}
	res, err = ResetLedger(ctx, dir, LedgerResetOptions{AcceptLoss: true, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := os.ReadFile(res.KeptPath); err != nil || !bytes.Equal(kept, bad) {
		t.Fatalf("damaged ledger not kept at %q: %v", res.KeptPath, err)
	}

	s = openTest(t, dir, Options{})
	refused := 0
	for _, v := range vols {
		if _, err := s.Advance(ctx, v, tok(uidA, 5)); RejectionReason(err) == ReasonLifecycleEnded {
			refused++
		}
	}
	if refused != 3 {
		t.Fatalf("%d of 4 retired lifecycles refused after the reset, want the 3 intact ones", refused)
	}
	s.Close()

	// A truncated ledger keeps its whole records.
	if err := os.WriteFile(path, good[:ledgerHeaderLen+16*3+7], 0o600); err != nil {
		t.Fatal(err)
	}
	res, err = ResetLedger(ctx, dir, LedgerResetOptions{AcceptLoss: true, Now: func() time.Time { return t0 }})
	if err != nil || res.Kept != 3 || !strings.HasSuffix(res.KeptPath, "-2") {
		t.Fatalf("truncated ledger: %+v, %v", res, err)
	}

	// A later format is not this release's to replace; nor is a missing
	// ledger anything to reset.
	if err := os.WriteFile(path, []byte("PCFL\x07whatever"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ResetLedger(ctx, dir, LedgerResetOptions{AcceptLoss: true})
	wantRefused(t, "a newer format", err, "format version 7")
	os.Remove(path)
	_, err = ResetLedger(ctx, dir, LedgerResetOptions{AcceptLoss: true})
	wantRefused(t, "no ledger", err, "no ledger")
}

// TestRetireDryRun: a dry run names what Retire would remove and removes
// nothing.
func TestRetireDryRun(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{Now: func() time.Time { return t0 }})
	if _, err := s.End(ctx, "pvc-1", tok(uidA, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, "pvc-2", tok(uidA, 1)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Retire(ctx, RetireOptions{DryRun: true})
	if err != nil || !cmp.Equal(got, []string{"pvc-1"}) {
		t.Fatalf("dry run: %v, %v", got, err)
	}
	if m, err := s.Get(ctx, "pvc-1"); err != nil || m == nil {
		t.Fatalf("dry run removed the mark: %v, %v", m, err)
	}
	if n := len(s.ledger.Load().fps); n != 0 {
		t.Fatalf("dry run wrote %d ledger entries", n)
	}
}
