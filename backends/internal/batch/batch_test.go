package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is a Run that records each batch's keys and, while gate is
// not nil, waits for a receive from it before answering.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	started chan struct{} // one send per batch started
	gate    chan struct{}
}

func newRecorder() *recorder {
	return &recorder{started: make(chan struct{}, 100), gate: make(chan struct{})}
}

func (r *recorder) run(_ context.Context, keys []string) map[string]Result[string] {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(keys))
	n := len(r.batches)
	r.mu.Unlock()
	r.started <- struct{}{}
	<-r.gate
	res := map[string]Result[string]{}
	for _, k := range keys {
		switch k {
		case "unanswered":
		case "bad":
			res[k] = Result[string]{Err: errors.New("bad key")}
		default:
			res[k] = Result[string]{Value: fmt.Sprintf("%s@%d", k, n)}
		}
	}
	return res
}

func (r *recorder) seen() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// waitQueued waits until n keys wait for a batch.
func waitQueued[V any](t *testing.T, g *Group[V], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q := g.Waiting()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLoneCallRunsAtOnce(t *testing.T) {
	r := newRecorder()
	close(r.gate)
	g := &Group[string]{Max: 8, Run: r.run}
	v, err := g.Do(context.Background(), "a")
	if err != nil || v != "a@1" {
		t.Fatalf("Do(a) = %q, %v; want a@1", v, err)
	}
	v, err = g.Do(context.Background(), "a")
	if err != nil || v != "a@2" {
		t.Fatalf("a second Do(a) = %q, %v; want a@2: each call is answered by a batch of its own time", v, err)
	}
	if got := r.seen(); !slices.EqualFunc(got, [][]string{{"a"}, {"a"}}, slices.Equal) {
		t.Fatalf("batches %v, want [[a] [a]]", got)
	}
}

func TestCallersJoinTheNextBatch(t *testing.T) {
	r := newRecorder()
	g := &Group[string]{Max: 3, Run: r.run}
	type answer struct {
		key, v string
		err    error
	}
	answers := make(chan answer, 10)
	ask := func(k string) {
		go func() {
			v, err := g.Do(context.Background(), k)
			answers <- answer{k, v, err}
		}()
	}
	ask("first")
	<-r.started // the first batch runs, holding the gate
	// Asked while it runs: they wait for batches after it, the same key
	// twice shares one place, and the first key again is looked up anew.
	for _, k := range []string{"b", "c", "b", "first", "d", "bad", "unanswered"} {
		ask(k)
	}
	waitQueued(t, g, 6)
	close(r.gate)
	got := map[string][]answer{}
	for range 8 {
		a := <-answers
		got[a.key] = append(got[a.key], a)
	}
	want := [][]string{{"first"}, {"b", "c", "first"}, {"d", "bad", "unanswered"}}
	// The order within the queue is the order of the goroutines' calls,
	// which is not fixed: compare the batches' sizes and their union.
	batches := r.seen()
	if len(batches) != 3 || len(batches[0]) != 1 || len(batches[1]) != 3 || len(batches[2]) != 3 {
		t.Fatalf("batches %v, want the sizes of %v", batches, want)
	}
	for _, a := range got["first"] {
		if a.err != nil {
			t.Errorf("first: %v", a.err)
		}
	}
	if len(got["first"]) != 2 || got["first"][0].v == got["first"][1].v {
		t.Errorf("first: answers %v, want two from different batches", got["first"])
	}
	if len(got["b"]) != 2 || got["b"][0].v != got["b"][1].v || got["b"][0].err != nil {
		t.Errorf("b: answers %v, want one answer shared by both callers", got["b"])
	}
	if a := got["bad"]; len(a) != 1 || a[0].err == nil || a[0].err.Error() != "bad key" {
		t.Errorf("bad: %v, want its own error", a)
	}
	if a := got["unanswered"]; len(a) != 1 || a[0].err == nil {
		t.Errorf("unanswered: %v, want an error", a)
	}
	for _, b := range batches {
		if len(b) > g.Max {
			t.Errorf("batch %v is larger than Max %d", b, g.Max)
		}
	}
}

func TestCallerThatStopsWaiting(t *testing.T) {
	r := newRecorder()
	g := &Group[string]{Max: 8, Run: r.run}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, "a")
		done <- err
	}()
	<-r.started
	other := make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), "b")
		other <- err
	}()
	waitQueued(t, g, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled caller got %v, want context.Canceled", err)
	}
	// The batches run on for the others, under a context the cancel
	// did not end.
	close(r.gate)
	if err := <-other; err != nil {
		t.Fatalf("the other caller: %v", err)
	}
}
