package controller

import (
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestEventQueue: events run in the order they were raised, one at a
// time, and past the bound new ones are dropped rather than queued.
func TestEventQueue(t *testing.T) {
	var q eventQueue
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gate, running := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var ran []int
	q.add(log, func() { close(running); <-gate })
	<-running
	for i := range maxQueuedClaimEvents + 10 {
		q.add(log, func() { mu.Lock(); ran = append(ran, i); mu.Unlock() })
	}
	if q.idle() {
		t.Fatal("idle with events waiting")
	}
	close(gate)
	for deadline := time.Now().Add(10 * time.Second); !q.idle(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the queue did not drain in 10s")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// While the first ran, maxQueuedClaimEvents waited; the rest were
	// dropped.
	want := make([]int, maxQueuedClaimEvents)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(ran, want) {
		t.Errorf("ran %d events (first %v), want the first %d in order", len(ran), ran[:min(len(ran), 5)], len(want))
	}
	// A queue that drained starts again.
	done := make(chan struct{})
	q.add(log, func() { close(done) })
	<-done
}
