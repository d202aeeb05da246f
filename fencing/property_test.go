package fencing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// The property: for one volume, no request is accepted after a newer one.
//
// "Newer" is the order in which the controller issues requests: lifecycles
// in order of creation, within a lifecycle its mutations by generation and
// then its end. A controller creates lifecycle l+1 only after the agent
// accepted the end of lifecycle l (the PillarVolumeState finalizer), and
// generations within a lifecycle never decrease. Every request it ever sent
// may be delivered again later, at any moment, any number of times, and with
// an older generation or as a mutation instead of an end: that is what a
// stale controller or a slow network does. The sequence of accepted requests
// must then be non-decreasing in orderKey, and the live controller's own
// requests must always be accepted.

type orderKey struct {
	lifecycle int
	end       bool
	gen       uint64
}

func (a orderKey) compare(b orderKey) int {
	switch {
	case a.lifecycle != b.lifecycle:
		return a.lifecycle - b.lifecycle
	case a.end != b.end:
		if a.end {
			return 1
		}
		return -1
	case a.gen < b.gen:
		return -1
	case a.gen > b.gen:
		return 1
	}
	return 0
}

type request struct {
	kind Kind
	tok  Token
	key  orderKey
}

// controller issues the live requests for one volume.
type controller struct {
	rng        *rand.Rand
	lifecycles int // how many to run
	l          int
	uid        string
	gen        uint64
	left       int // mutations left in this lifecycle before the end
	done       bool
}

func newController(rng *rand.Rand, lifecycles int) *controller {
	c := &controller{rng: rng, lifecycles: lifecycles}
	c.begin()
	return c
}

func (c *controller) begin() {
	c.uid = fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", c.rng.Uint32(), c.rng.Uint32()&0xffff,
		c.rng.Uint32()&0xffff, c.rng.Uint32()&0xffff, c.rng.Uint64()&0xffffffffffff)
	// A new lifecycle may start below the old one's generation: they are
	// independent counters on different objects.
	c.gen = c.rng.Uint64N(4)
	c.left = 1 + c.rng.IntN(6)
}

// current is the request the controller sends now (again, if it was lost).
func (c *controller) current() request {
	if c.left > 0 {
		return request{KindMutate, Token{c.uid, c.gen}, orderKey{c.l, false, c.gen}}
	}
	return request{KindEnd, Token{c.uid, c.gen}, orderKey{c.l, true, c.gen}}
}

// advance moves past an accepted current request.
func (c *controller) advance() {
	switch {
	case c.left > 0:
		c.left--
		c.gen += c.rng.Uint64N(3) // 0: the next request is a retry
	case c.l+1 < c.lifecycles:
		c.l++
		c.begin()
	default:
		c.done = true
	}
}

// stale returns a replay of a request from pool, possibly degraded.
func stale(rng *rand.Rand, pool []request) request {
	r := pool[rng.IntN(len(pool))]
	if d := rng.Uint64N(3); d <= r.tok.Generation && rng.IntN(2) == 0 {
		r.tok.Generation -= d
		r.key.gen -= d
	}
	if r.kind == KindEnd && rng.IntN(3) == 0 {
		r.kind, r.key.end = KindMutate, false
	}
	return r
}

// TestDecideNeverAcceptsOlder drives Decide alone through many random
// schedules of one volume, with retirement and history overflow simulated
// as the store does them.
func TestDecideNeverAcceptsOlder(t *testing.T) {
	seeds := 2000
	if testing.Short() {
		seeds = 200
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 1))
		c := newController(rng, 2+rng.IntN(5))
		historyLimit := 1 + rng.IntN(3)
		retired := map[string]bool{}
		var (
			mark    *Mark
			pool    []request
			last    orderKey
			anyYet  bool
			history []string
		)
		deliver := func(r request, live bool) {
			d := Decide(mark, r.kind, r.tok, t0, func(uid string) bool { return retired[uid] })
			if !d.Accepted() {
				// As in the store test: a lost copy of this end may have been
				// delivered and its tombstone retired since.
				if live && !(r.kind == KindEnd && d.Reason == ReasonLifecycleEnded) {
					t.Fatalf("seed %d: live request %v %v refused: %v (rule %d: %s); history %v",
						seed, r.kind, r.tok, d.Reason, d.Rule, d.Detail, history)
				}
				return
			}
			if anyYet && r.key.compare(last) < 0 {
				t.Fatalf("seed %d: accepted %v %v (key %+v) after key %+v (rule %d); history %v",
					seed, r.kind, r.tok, r.key, last, d.Rule, history)
			}
			last, anyYet = r.key, true
			history = append(history, fmt.Sprintf("%v %v -> rule %d", r.kind, r.tok, d.Rule))
			mark = d.Mark
			if over := len(mark.History) - historyLimit; over > 0 {
				for _, e := range mark.History[:over] {
					retired[e.UID] = true
				}
				mark.History = mark.History[over:]
			}
		}
		for step := 0; step < 400 && !c.done; step++ {
			switch p := rng.IntN(20); {
			case p < 7:
				r := c.current()
				pool = append(pool, r)
				deliver(r, true)
				c.advance()
			case p < 9:
				pool = append(pool, c.current()) // lost; the controller will retry
			case p < 10:
				if mark != nil && mark.Phase == PhaseEnded {
					for _, e := range mark.History {
						retired[e.UID] = true
					}
					mark = nil
					history = append(history, "retired")
				}
			default:
				if len(pool) > 0 {
					deliver(stale(rng, pool), false)
				}
			}
		}
	}
}

// TestStoreNeverAcceptsOlder runs the same property against a real Store,
// with real concurrency: per volume, a live controller and stale replayers
// send requests through Do at the same time, a retirer retires tombstones
// with no grace, and every accepted request logs its key from inside Do,
// i.e. in the order the store admitted them.
func TestStoreNeverAcceptsOlder(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 1
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runStoreInterleaving(t, seed) })
	}
}

func runStoreInterleaving(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 2))
	s := openTest(t, t.TempDir(), Options{HistoryLimit: 1 + rng.IntN(2)})
	const volumes, replayers = 3, 3

	type volumeState struct {
		mu       sync.Mutex
		pool     []request
		accepted []request // in admission order
		done     bool
	}
	states := make([]*volumeState, volumes)
	var wg sync.WaitGroup
	errs := make(chan error, volumes*(replayers+1)+1)
	send := func(v int, r request) error {
		st := states[v]
		return s.Do(ctx, fmt.Sprint("pvc-prop-", v), r.kind, r.tok, func(context.Context) error {
			st.mu.Lock()
			st.accepted = append(st.accepted, r)
			st.mu.Unlock()
			return nil
		})
	}
	for v := range volumes {
		st := &volumeState{}
		states[v] = st
		crng := rand.New(rand.NewPCG(seed, uint64(100+v)))
		c := newController(crng, 3+crng.IntN(3))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { st.mu.Lock(); st.done = true; st.mu.Unlock() }()
			for !c.done {
				r := c.current()
				st.mu.Lock()
				st.pool = append(st.pool, r)
				st.mu.Unlock()
				if crng.IntN(5) == 0 {
					continue // lost; resent next round
				}
				err := send(v, r)
				// A replayer may have delivered a lost copy of this end, and
				// the retirer removed the tombstone since: the end is then
				// refused as ended, and has nothing left to do.
				if err != nil && !(r.kind == KindEnd && RejectionReason(err) == ReasonLifecycleEnded) {
					errs <- fmt.Errorf("volume %d: live request %v %v refused: %w", v, r.kind, r.tok, err)
					return
				}
				c.advance()
			}
		}()
		for i := range replayers {
			rrng := rand.New(rand.NewPCG(seed, uint64(1000+10*v+i)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					st.mu.Lock()
					done, pool := st.done, slices.Clone(st.pool)
					st.mu.Unlock()
					if done {
						return
					}
					if len(pool) == 0 {
						time.Sleep(100 * time.Microsecond)
						continue
					}
					if err := send(v, stale(rrng, pool)); err != nil && !IsRejected(err) {
						errs <- fmt.Errorf("volume %d: stale request failed without a verdict: %w", v, err)
						return
					}
				}
			}()
		}
	}
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if _, err := s.Retire(ctx, RetireOptions{}); err != nil {
				errs <- fmt.Errorf("retire: %w", err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	total := 0
	for v, st := range states {
		total += len(st.accepted)
		for i := 1; i < len(st.accepted); i++ {
			if a, b := st.accepted[i-1], st.accepted[i]; b.key.compare(a.key) < 0 {
				t.Fatalf("volume %d: accepted %v %v (key %+v) after %v %v (key %+v)",
					v, b.kind, b.tok, b.key, a.kind, a.tok, a.key)
			}
		}
	}
	t.Logf("seed %d: %d requests accepted in admission order", seed, total)
}
