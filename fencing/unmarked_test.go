package fencing

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestDoCheckedUnmarked is rule 19: without a mark, a volume that exists is
// refused for every token and kind, nothing is written, and the caller's
// change does not run; one that does not exist is admitted as before; an
// error of the check refuses without a fencing reason; a volume with a mark
// is decided without asking.
func TestDoCheckedUnmarked(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{Now: func() time.Time { return t0 }})
	exists := func(found bool, err error) (Exists, *int) {
		calls := new(int)
		return func(context.Context) (bool, error) { *calls++; return found, err }, calls
	}
	for _, k := range []Kind{KindMutate, KindEnd} {
		ran := false
		check, calls := exists(true, nil)
		err := s.DoChecked(ctx, "pvc-lost", k, tok(uidA, 3), check, func(context.Context) error { ran = true; return nil })
		wantReason(t, "existing unmarked volume, "+k.String(), err, ReasonUnmarked)
		var fe *Error
		if !errors.As(err, &fe) || fe.Reason != ReasonUnmarked {
			t.Errorf("%s: %v is not a fencing refusal", k, err)
		}
		if ran || *calls != 1 {
			t.Errorf("%s: change ran %v, check called %d times; want false, 1", k, ran, *calls)
		}
		if m, err := s.Get(ctx, "pvc-lost"); m != nil || err != nil {
			t.Errorf("%s: the refusal left mark %v (%v)", k, m, err)
		}
	}

	broken, _ := exists(false, errors.New("zfs: timed out"))
	err := s.DoChecked(ctx, "pvc-lost", KindMutate, tok(uidA, 3), broken, func(context.Context) error { return nil })
	if err == nil || IsRejected(err) {
		t.Errorf("a failed check: %v, want an error that is not a fencing refusal", err)
	}
	if m, _ := s.Get(ctx, "pvc-lost"); m != nil {
		t.Errorf("a failed check wrote mark %v", m)
	}

	check, calls := exists(false, nil)
	ran := false
	if err := s.DoChecked(ctx, "pvc-new", KindMutate, tok(uidA, 1), check, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("a new volume: %v (ran %v)", err, ran)
	}
	present, presentCalls := exists(true, nil)
	if err := s.DoChecked(ctx, "pvc-new", KindMutate, tok(uidA, 2), present, func(context.Context) error { return nil }); err != nil {
		t.Errorf("a marked volume that exists: %v", err)
	}
	if *calls != 1 || *presentCalls != 0 {
		t.Errorf("checks called %d and %d times, want 1 and 0 (never with a mark)", *calls, *presentCalls)
	}
	// A plain Do keeps rules 5 and 6 as they are.
	if err := s.Do(ctx, "pvc-lost", KindMutate, tok(uidB, 1), func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do without a check: %v", err)
	}
}

// TestAdopt: a lost mark is written back for the lifecycle the operator
// names, after which the volume is fenced as before; adopt never replaces
// a mark file and never revives a retired lifecycle.
func TestAdopt(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{Now: func() time.Time { return t0 }})
	exists := func(context.Context) (bool, error) { return true, nil }
	noop := func(context.Context) error { return nil }

	if m, err := s.Adopt(ctx, "pvc-1", AdoptOptions{Token: tok(uidA, 5), DryRun: true}); err != nil || m.UID != uidA || m.Generation != 5 {
		t.Fatalf("dry run: %v, %v", m, err)
	}
	if m, _ := s.Get(ctx, "pvc-1"); m != nil {
		t.Fatalf("the dry run wrote %v", m)
	}
	if _, err := s.Adopt(ctx, "pvc-1", AdoptOptions{Token: tok(uidA, 0)}); !errors.Is(err, ErrRecoveryRefused) {
		t.Errorf("generation 0: %v, want a refusal", err)
	}
	if _, err := s.Adopt(ctx, "pvc-1", AdoptOptions{Token: tok(uidA, 5)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DoChecked(ctx, "pvc-1", KindMutate, tok(uidA, 5), exists, noop); err != nil {
		t.Errorf("the adopted lifecycle at its generation: %v", err)
	}
	err := s.DoChecked(ctx, "pvc-1", KindMutate, tok(uidA, 4), exists, noop)
	wantReason(t, "below the adopted generation", err, ReasonStaleGeneration)
	err = s.DoChecked(ctx, "pvc-1", KindEnd, tok(uidB, 9), exists, noop)
	wantReason(t, "another lifecycle", err, ReasonLifecycleReplaced)

	_, err = s.Adopt(ctx, "pvc-1", AdoptOptions{Token: tok(uidB, 1)})
	wantRefused(t, "a volume with a mark", err, "has a mark file")
	if err := os.WriteFile(s.path("pvc-2"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.Adopt(ctx, "pvc-2", AdoptOptions{Token: tok(uidA, 1)})
	wantRefused(t, "a damaged mark", err, "ResetMark")
	if err := os.Remove(s.path("pvc-2")); err != nil {
		t.Fatal(err)
	}

	// Ended: only the End of the adopted lifecycle is admitted.
	if _, err := s.Adopt(ctx, "pvc-3", AdoptOptions{Token: tok(uidC, 4), Ended: true}); err != nil {
		t.Fatal(err)
	}
	err = s.DoChecked(ctx, "pvc-3", KindMutate, tok(uidC, 4), exists, noop)
	wantReason(t, "a mutation of an ended adoption", err, ReasonLifecycleEnded)
	if err := s.DoChecked(ctx, "pvc-3", KindEnd, tok(uidC, 4), exists, noop); err != nil {
		t.Errorf("the retried DeleteVolume of an ended adoption: %v", err)
	}

	// A retired lifecycle is never adopted.
	if _, err := s.Retire(ctx, RetireOptions{}); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Get(ctx, "pvc-3"); m != nil {
		t.Fatalf("pvc-3 was not retired: %v", m)
	}
	_, err = s.Adopt(ctx, "pvc-3", AdoptOptions{Token: tok(uidC, 5)})
	wantRefused(t, "a retired lifecycle", err, "retired")
}
