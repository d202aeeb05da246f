package fencing

import (
	"context"
	"testing"
	"time"
)

// TestDoCheckedAll: every check is admitted before fn runs; a refused one
// names its index and fn does not run; and a Close that arrives while fn
// runs waits for it, instead of deadlocking as two nested DoChecked calls
// did (each took the store's read lock, and a pending Close blocks the
// second).
func TestDoCheckedAll(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	a, b := Token{UID: "uid-a", Generation: 1}, Token{UID: "uid-b", Generation: 1}
	ran := false
	if i, err := s.DoCheckedAll(ctx, []Check{{VolumeID: "pvc-a", Kind: KindMutate, Token: a}, {VolumeID: "snapshot/s", Kind: KindMutate, Token: b}},
		func(context.Context) error { ran = true; return nil }); err != nil || i != -1 || !ran {
		t.Fatalf("both admitted: refused %d, %v, ran %v", i, err, ran)
	}
	ran = false
	i, err := s.DoCheckedAll(ctx, []Check{{VolumeID: "pvc-a", Kind: KindMutate, Token: a}, {VolumeID: "snapshot/s", Kind: KindMutate, Token: Token{UID: "uid-c", Generation: 1}}},
		func(context.Context) error { ran = true; return nil })
	if i != 1 || !IsRejected(err) || RejectionReason(err) != ReasonLifecycleReplaced || ran {
		t.Fatalf("second refused: refused %d, %v, ran %v", i, err, ran)
	}
	if i, err := s.DoCheckedAll(ctx, []Check{{VolumeID: "pvc-a", Kind: KindMutate, Token: a}, {VolumeID: "pvc-a", Kind: KindMutate, Token: a}},
		func(context.Context) error { return nil }); i != 1 || err == nil {
		t.Fatalf("one volume checked twice: refused %d, %v", i, err)
	}

	inFn, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := s.DoCheckedAll(ctx, []Check{{VolumeID: "pvc-a", Kind: KindMutate, Token: a}, {VolumeID: "snapshot/s", Kind: KindMutate, Token: b}},
			func(context.Context) error { close(inFn); <-release; return nil })
		done <- err
	}()
	<-inFn
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	time.Sleep(50 * time.Millisecond) // Close is now waiting for fn
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DoCheckedAll did not return with a Close pending")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
