// Package batchtest checks, in unit tests, a backend whose Gets made at
// once share their commands (backends.GetSharer), and waits for the
// goroutines of such a test to get where it needs them (Await).
package batchtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
)

// Held is a command runner whose first command waits until Release; each
// command is answered by its answer function, the first by first.
type Held struct {
	first, answer func(argv []string) ([]byte, error)
	release       chan struct{}

	mu    sync.Mutex
	calls [][]string
}

// NewHeld returns a Held runner answering its first command with first
// and every other with answer.
func NewHeld(first, answer func(argv []string) ([]byte, error)) *Held {
	return &Held{first: first, answer: answer, release: make(chan struct{})}
}

// Run implements command.Runner.
func (h *Held) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return h.RunInput(ctx, nil, name, args...)
}

// RunInput implements command.InputRunner.
func (h *Held) RunInput(_ context.Context, _ []byte, name string, args ...string) ([]byte, error) {
	argv := append([]string{name}, args...)
	h.mu.Lock()
	h.calls = append(h.calls, argv)
	n := len(h.calls)
	h.mu.Unlock()
	if n == 1 {
		<-h.release
		return h.first(argv)
	}
	return h.answer(argv)
}

// Calls returns the commands run so far.
func (h *Held) Calls() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]string(nil), h.calls...)
}

// Shared makes a Get of first, whose command h holds; once it runs, it
// makes a Get of every volume in want at once, and once waiting reports
// them all queued behind it, it releases the first. Every Get must then
// be answered on its own: the volume first and, for a volume whose want
// is nil, the volume of that ID and size bytes, else an error wrapping
// want. The caller checks the commands h saw.
func Shared(t testing.TB, b backends.Backend, h *Held, first string, size int64, want map[string]error, waiting func() int) {
	t.Helper()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := b.Get(ctx, first)
		done <- err
	}()
	Await(t, "the first Get's command", func() bool { return len(h.Calls()) == 1 })
	got := make(map[string]error, len(want))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id := range want {
		wg.Go(func() {
			v, err := b.Get(ctx, id)
			if err == nil && (v.ID != id || v.SizeBytes != size) {
				err = errors.New("got volume " + v.ID)
			}
			mu.Lock()
			got[id] = err
			mu.Unlock()
		})
	}
	Await(t, "the other Gets queued", func() bool { return waiting() == len(want) })
	close(h.release)
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatalf("Get %s: %v", first, err)
	}
	for id, w := range want {
		if err := got[id]; (w == nil) != (err == nil) || (w != nil && !errors.Is(err, w)) {
			t.Errorf("Get %s: %v, want %v", id, err, w)
		}
	}
}

// Await waits until cond holds, for at most a minute, and fails t
// naming what it waited for when it does not.
func Await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}
