// Package batch answers the look-ups of many callers with few commands.
package batch

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Result is the answer to one key of a batch.
type Result[V any] struct {
	Value V
	Err   error
}

// Group runs look-ups of keys in batches, one batch at a time: a key asked
// for joins the next batch, so each caller is answered by a batch that
// started after it asked, and an answer is never older than a look-up the
// caller would have made itself. A lone caller's batch starts at once. The
// zero Group is not usable: Run must be set. A Group is safe for
// concurrent use.
type Group[V any] struct {
	// Max is the most keys one batch is given; at least 1.
	Max int
	// Run looks up keys and answers each of them; a key it leaves out is
	// answered with an error. It runs under the context of the caller that
	// started the batches, without its cancellation: the command's own
	// timeout bounds it, and callers that stop waiting leave it running
	// for the others.
	Run func(ctx context.Context, keys []string) map[string]Result[V]

	mu      sync.Mutex
	queue   []string            // keys not yet in a batch, in the order asked
	waiting map[string]*call[V] // the call of each key in queue
	running bool                // whether a goroutine is running batches
}

type call[V any] struct {
	done chan struct{}
	res  Result[V]
}

// Do returns the answer to key from the next batch that includes it, or
// ctx's error if ctx ends first. Callers asking for the same key before
// its batch starts share one answer.
func (g *Group[V]) Do(ctx context.Context, key string) (V, error) {
	g.mu.Lock()
	c, ok := g.waiting[key]
	if !ok {
		c = &call[V]{done: make(chan struct{})}
		if g.waiting == nil {
			g.waiting = map[string]*call[V]{}
		}
		g.waiting[key] = c
		g.queue = append(g.queue, key)
	}
	if !g.running {
		g.running = true
		go g.loop(context.WithoutCancel(ctx))
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.res.Value, c.res.Err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// Waiting returns how many keys wait for a batch to start.
func (g *Group[V]) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// loop runs batches until no key waits.
func (g *Group[V]) loop(ctx context.Context) {
	for {
		g.mu.Lock()
		n := min(len(g.queue), max(g.Max, 1))
		if n == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		keys := slices.Clone(g.queue[:n])
		g.queue = g.queue[n:]
		calls := make([]*call[V], n)
		for i, k := range keys {
			calls[i] = g.waiting[k]
			delete(g.waiting, k)
		}
		g.mu.Unlock()

		res := g.Run(ctx, keys)
		for i, k := range keys {
			r, ok := res[k]
			if !ok {
				r.Err = fmt.Errorf("look-up of %s: the batch gave no answer", k)
			}
			calls[i].res = r
			close(calls[i].done)
		}
	}
}
