package keylock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTryLock(t *testing.T) {
	for _, tc := range []struct {
		name       string
		held       map[string]string // key -> op already holding it
		key, op    string
		wantOK     bool
		wantHolder string
	}{
		{name: "free key", key: "pvc-1", op: "NodeStageVolume", wantOK: true},
		{name: "busy key names its holder", held: map[string]string{"pvc-1": "CreateVolume"}, key: "pvc-1", op: "DeleteVolume", wantHolder: "CreateVolume"},
		{name: "other key busy", held: map[string]string{"pvc-2": "CreateVolume"}, key: "pvc-1", op: "DeleteVolume", wantOK: true},
		{name: "holder without an op name", held: map[string]string{"pvc-1": ""}, key: "pvc-1", op: "x", wantHolder: ""},
		{name: "empty key is a key like any other", held: map[string]string{"": "a"}, key: "", op: "b", wantHolder: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Locks
			for k, op := range tc.held {
				if _, _, ok := l.TryLock(k, op); !ok {
					t.Fatalf("setup: %q busy", k)
				}
			}
			unlock, holder, ok := l.TryLock(tc.key, tc.op)
			if ok != tc.wantOK || holder != tc.wantHolder || (unlock != nil) != ok {
				t.Fatalf("TryLock = (unlock %v, %q, %v), want (%q, %v)", unlock != nil, holder, ok, tc.wantHolder, tc.wantOK)
			}
		})
	}
}

func TestUnlockFreesTheKeyOnce(t *testing.T) {
	var l Locks
	unlock, _, _ := l.TryLock("v", "first")
	unlock()
	second, _, ok := l.TryLock("v", "second")
	if !ok {
		t.Fatal("the key stayed busy after unlock")
	}
	// A repeated unlock of the first holder must not free the second's.
	unlock()
	if _, holder, ok := l.TryLock("v", "third"); ok || holder != "second" {
		t.Fatalf("after a repeated unlock: ok %v, holder %q; want held by second", ok, holder)
	}
	second()
}

func TestLockWaitsForTheHolder(t *testing.T) {
	var l Locks
	unlock, _, _ := l.TryLock("v", "CreateVolume")
	got := make(chan error, 1)
	go func() {
		u, err := l.Lock(context.Background(), "v", "ExportVolume")
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Lock returned %v while the key was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock did not return after the holder let go")
	}
}

func TestLockGivesUpWithItsContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Locks
			unlock, _, _ := l.TryLock("v", "CreateVolume")
			defer unlock()
			ctx, cancel := tc.ctx()
			defer cancel()
			u, err := l.Lock(ctx, "v", "DeleteVolume")
			if u != nil {
				t.Fatal("Lock handed out an unlock with its error")
			}
			var we *WaitError
			if !errors.As(err, &we) || we.Holder != "CreateVolume" || we.Key != "v" || !errors.Is(err, tc.want) {
				t.Fatalf("Lock = %v, want a WaitError on v held by CreateVolume wrapping %v", err, tc.want)
			}
			// The waiter that gave up took nothing.
			if _, holder, ok := l.TryLock("v", "x"); ok || holder != "CreateVolume" {
				t.Fatalf("after the timeout: ok %v, holder %q", ok, holder)
			}
		})
	}
}

func TestLockOnAFreeKeyIgnoresAnEndedContext(t *testing.T) {
	var l Locks
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// The context bounds only the wait, as the agent's lock always did:
	// a free key is taken whatever state the context is in.
	unlock, err := l.Lock(ctx, "v", "op")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// Many goroutines on a few keys: at most one holds a key at any time, and
// every waiter gets its turn. Run with -race.
func TestConcurrentHoldersAreExclusivePerKey(t *testing.T) {
	var l Locks
	keys := []string{"a", "b", "c"}
	inside := make([]atomic.Int32, len(keys))
	var acquired, refused atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				k := (g + i) % len(keys)
				var unlock func()
				if i%2 == 0 {
					u, err := l.Lock(context.Background(), keys[k], "wait")
					if err != nil {
						t.Error(err)
						return
					}
					unlock = u
				} else {
					u, _, ok := l.TryLock(keys[k], "try")
					if !ok {
						refused.Add(1)
						continue
					}
					unlock = u
				}
				if n := inside[k].Add(1); n != 1 {
					t.Errorf("%d holders of %q at once", n, keys[k])
				}
				acquired.Add(1)
				inside[k].Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	if want := int64(32*200) - refused.Load(); acquired.Load() != want {
		t.Fatalf("acquired %d, want %d", acquired.Load(), want)
	}
	for _, k := range keys {
		if _, holder, ok := l.TryLock(k, "after"); !ok {
			t.Errorf("%q still held by %q after every holder let go", k, holder)
		}
	}
}

// Different keys never wait for each other.
func TestKeysAreIndependent(t *testing.T) {
	var l Locks
	unlock, _, _ := l.TryLock("busy", "long")
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u, err := l.Lock(ctx, "free", "short")
	if err != nil {
		t.Fatalf("a free key waited for a busy one: %v", err)
	}
	u()
}
