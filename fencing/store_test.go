package fencing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestOpenExcludesOtherStores: while one store holds a directory, a second
// Open, in another process or in this one, is refused with ErrLocked; once
// the first closes, both can open it.
func TestOpenExcludesOtherStores(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{})

	if code := runOpenChild(t, dir); code != childLocked {
		t.Fatalf("another process opened a locked store: exit code %d, want %d", code, childLocked)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if s2, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open in the same process: %v, want ErrLocked", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code := runOpenChild(t, dir); code != childOpened {
		t.Fatalf("another process could not open a released store: exit code %d", code)
	}
	openTest(t, dir, Options{})
}

// TestOpenWaitsForLock: Open retries while the lock is held and succeeds
// once it is released within the context's deadline.
func TestOpenWaitsForLock(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	time.AfterFunc(100*time.Millisecond, func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s2, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatalf("Open did not get the released lock: %v", err)
	}
	s2.Close()
}

func TestOpenOptions(t *testing.T) {
	ctx := context.Background()
	for _, limit := range []int{-1, maxHistory + 1} {
		if _, err := Open(ctx, t.TempDir(), Options{HistoryLimit: limit}); err == nil {
			t.Errorf("HistoryLimit %d accepted", limit)
		}
	}
	if _, err := Open(ctx, "", Options{}); err == nil {
		t.Error("empty directory accepted")
	}
	// Open creates the directory, private to its owner.
	dir := filepath.Join(t.TempDir(), "a", "generations")
	s := openTest(t, dir, Options{})
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v, %v", fi, err)
	}
	if s.Dir() != dir {
		t.Errorf("Dir() = %q", s.Dir())
	}
}

func TestOpenRemovesTemporaries(t *testing.T) {
	dir := t.TempDir()
	leftovers := []string{".v.pvc-1" + "8071665482993746411", ".b.mfrgg123", "." + ledgerFileName + "42"}
	keep := []string{".other", "notes"}
	for _, n := range append(slices.Clone(leftovers), keep...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	openTest(t, dir, Options{})
	for _, n := range leftovers {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s not removed: %v", n, err)
		}
	}
	for _, n := range keep {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("unrelated file %s removed: %v", n, err)
		}
	}
}

func TestOpenRefusesCorruptLedger(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ledgerFileName), []byte("PCFL\x01garbage!"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(context.Background(), dir, Options{}); !errors.Is(err, ErrCorruptMark) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open with a corrupt ledger: %v, want ErrCorruptMark", err)
	}
	// The failed Open released the lock: once the ledger is dealt with, the
	// directory opens.
	if err := os.Remove(filepath.Join(dir, ledgerFileName)); err != nil {
		t.Fatal(err)
	}
	openTest(t, dir, Options{})
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Advance(ctx, "pvc-1", tok(uidA, 1)); !errors.Is(err, ErrClosed) || IsRejected(err) {
		t.Errorf("Advance after Close: %v", err)
	}
	if _, err := s.Get(ctx, "pvc-1"); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if _, err := s.Retire(ctx, RetireOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Retire after Close: %v", err)
	}
}

// TestUnreadableMarks: a mark that cannot be read for any reason fails
// closed, and is never replaced.
func TestUnreadableMarks(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})

	// A directory where the mark should be: read fails with EISDIR.
	if err := os.Mkdir(s.path("pvc-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Another volume's valid mark copied under this volume's name.
	if _, err := s.Advance(ctx, "pvc-a", tok(uidA, 3)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.path("pvc-a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("pvc-b"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	// An empty file, as a non-atomic writer could leave.
	if err := os.WriteFile(s.path("pvc-empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, vol := range []string{"pvc-dir", "pvc-b", "pvc-empty"} {
		for _, k := range []Kind{KindMutate, KindEnd} {
			err := s.Do(ctx, vol, k, tok(uidA, 9), func(context.Context) error { return nil })
			if RejectionReason(err) != ReasonMarkUnreadable {
				t.Errorf("%s %v: %v, want MARK_UNREADABLE", vol, k, err)
			}
		}
	}
	if got, err := os.ReadFile(s.path("pvc-b")); err != nil || string(got) != string(data) {
		t.Error("unreadable mark was rewritten")
	}
}

// TestVolumesDoNotBlockEachOther: a slow operation under one volume's lock
// holds up that volume only.
func TestVolumesDoNotBlockEachOther(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Do(ctx, "pvc-slow", KindMutate, tok(uidA, 1), func(context.Context) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.Advance(short, "pvc-other", tok(uidB, 1)); err != nil {
		t.Fatalf("another volume waited for the busy one: %v", err)
	}
	busy, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	_, err := s.Advance(busy, "pvc-slow", tok(uidA, 2))
	if !errors.Is(err, context.DeadlineExceeded) || IsRejected(err) {
		t.Fatalf("request for the busy volume: %v, want a deadline error", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m, err := s.Advance(ctx, "pvc-slow", tok(uidA, 2)); err != nil || m.Generation != 2 {
		t.Fatalf("after release: %v, %v", m, err)
	}
}

// TestDoOrdersChanges: while an accepted change runs under Do, a newer
// token waits for it, and an older one is refused afterwards.
func TestDoOrdersChanges(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	var mu sync.Mutex
	var log []uint64
	inside, release := make(chan struct{}), make(chan struct{})
	go s.Do(ctx, "pvc-1", KindMutate, tok(uidA, 5), func(context.Context) error {
		close(inside)
		<-release
		mu.Lock()
		log = append(log, 5)
		mu.Unlock()
		return nil
	})
	<-inside
	newer := make(chan error)
	go func() {
		newer <- s.Do(ctx, "pvc-1", KindMutate, tok(uidA, 6), func(context.Context) error {
			mu.Lock()
			log = append(log, 6)
			mu.Unlock()
			return nil
		})
	}()
	time.Sleep(20 * time.Millisecond)
	close(release)
	if err := <-newer; err != nil {
		t.Fatal(err)
	}
	fnErr := errors.New("backend failed")
	if err := s.Do(ctx, "pvc-1", KindMutate, tok(uidA, 6), func(context.Context) error { return fnErr }); err != fnErr {
		t.Fatalf("Do did not return fn's error: %v", err)
	}
	if err := s.Do(ctx, "pvc-1", KindMutate, tok(uidA, 5), func(context.Context) error { return nil }); RejectionReason(err) != ReasonStaleGeneration {
		t.Fatalf("older token after newer: %v", err)
	}
	if diff := cmp.Diff([]uint64{5, 6}, log); diff != "" {
		t.Fatalf("order of changes (-want +got):\n%s", diff)
	}
}

// TestHistorySpillsToLedger: a volume recreated more often than the history
// limit keeps refusing every earlier lifecycle, also after a restart.
func TestHistorySpillsToLedger(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{HistoryLimit: 2})
	var uids []string
	for i := 0; i < 6; i++ {
		u := strings.Repeat(string(rune('a'+i)), 8)
		uids = append(uids, u)
		if _, err := s.Advance(ctx, "pvc-1", tok(u, 1)); err != nil {
			t.Fatalf("lifecycle %d: %v", i, err)
		}
		m, err := s.End(ctx, "pvc-1", tok(u, 2))
		if err != nil {
			t.Fatalf("end %d: %v", i, err)
		}
		if len(m.History) > 2 {
			t.Fatalf("history of %d entries, limit 2", len(m.History))
		}
	}
	if n := len(s.ledger.Load().fps); n != 4 {
		t.Fatalf("ledger holds %d lifecycles, want 4", n)
	}
	check := func(s *Store) {
		t.Helper()
		for _, u := range uids {
			if _, err := s.Advance(ctx, "pvc-1", tok(u, 100)); RejectionReason(err) != ReasonLifecycleEnded {
				t.Errorf("ended lifecycle %s: %v, want LIFECYCLE_ENDED", u, err)
			}
		}
	}
	check(s)
	s.Close()
	check(openTest(t, dir, Options{HistoryLimit: 2}))
}

func TestRetire(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := t0
	clock := func() time.Time { return now }
	s := openTest(t, dir, Options{Now: clock})

	must := func(_ *Mark, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Advance(ctx, "pvc-live", tok(uidA, 1)))
	must(s.Advance(ctx, "pvc-old", tok(uidA, 1)))
	must(s.End(ctx, "pvc-old", tok(uidA, 2)))
	must(s.End(ctx, "pvc-kept", tok(uidB, 2)))
	now = t0.Add(90 * time.Minute)
	must(s.End(ctx, "pvc-young", tok(uidC, 1)))
	if err := os.WriteFile(s.path("pvc-corrupt"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retire(ctx, RetireOptions{Grace: -time.Second}); err == nil {
		t.Fatal("negative grace accepted")
	}

	now = t0.Add(2 * time.Hour)
	retired, err := s.Retire(ctx, RetireOptions{
		Grace: time.Hour,
		Keep:  func(id string) bool { return id == "pvc-kept" },
	})
	if RejectionReason(err) != ReasonMarkUnreadable || !strings.Contains(err.Error(), "pvc-corrupt") {
		t.Errorf("Retire did not report the corrupt mark: %v", err)
	}
	if diff := cmp.Diff([]string{"pvc-old"}, retired); diff != "" {
		t.Fatalf("retired (-want +got):\n%s", diff)
	}
	for _, vol := range []string{"pvc-live", "pvc-kept", "pvc-young", "pvc-corrupt"} {
		if _, err := os.Stat(s.path(vol)); err != nil {
			t.Errorf("%s: mark removed: %v", vol, err)
		}
	}
	if m, err := s.Get(ctx, "pvc-old"); err != nil || m != nil {
		t.Fatalf("retired mark still there: %v, %v", m, err)
	}

	// The retired lifecycle stays refused (rule 4), even its End retry.
	if _, err := s.Advance(ctx, "pvc-old", tok(uidA, 3)); RejectionReason(err) != ReasonLifecycleEnded {
		t.Errorf("retired lifecycle mutates: %v", err)
	}
	if _, err := s.End(ctx, "pvc-old", tok(uidA, 2)); RejectionReason(err) != ReasonLifecycleEnded {
		t.Errorf("retired lifecycle ends again: %v", err)
	}
	// A new lifecycle of the same volume is admitted (rule 5); the same UID
	// on another volume is unaffected.
	must(s.Advance(ctx, "pvc-old", tok(uidB, 0)))
	must(s.Advance(ctx, "pvc-other", tok(uidA, 0)))
	// After a restart, and after the new lifecycle ended too, the retired
	// one is still refused (rule 15 through the ledger).
	must(s.End(ctx, "pvc-old", tok(uidB, 1)))
	s.Close()
	s = openTest(t, dir, Options{Now: clock})
	if _, err := s.Advance(ctx, "pvc-old", tok(uidA, 9)); RejectionReason(err) != ReasonLifecycleEnded {
		t.Errorf("retired lifecycle after restart: %v", err)
	}
	must(s.Advance(ctx, "pvc-old", tok(uidC, 0)))

	// Retiring again retires what became old, and is idempotent.
	now = t0.Add(10 * time.Hour)
	retired, _ = s.Retire(ctx, RetireOptions{Grace: time.Hour})
	if diff := cmp.Diff([]string{"pvc-kept", "pvc-young"}, retired); diff != "" {
		t.Fatalf("second retire (-want +got):\n%s", diff)
	}
	retired, _ = s.Retire(ctx, RetireOptions{Grace: time.Hour})
	if len(retired) != 0 {
		t.Fatalf("third retire retired %v", retired)
	}
}
