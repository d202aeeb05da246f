package fencing

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The crash test: a child process (the test binary, re-executed) advances
// the marks of several volumes as fast as it can, and the test SIGKILLs it
// at a random moment, again and again. After each kill every mark must hold
// either the last value the child saw acknowledged or the one it was
// writing: never torn, never missing, never older.
//
// The number of kills comes from crashKillsEnv, so that `make test` can run
// a short loop and CI a long one; the go command caches test results by the
// environment variables a test reads, so changing it reruns the test.
const (
	crashKillsEnv     = "PILLAR_FENCING_CRASH_KILLS"
	defaultCrashKills = 20

	// Each lifecycle makes crashStepsPerLifecycle requests: mutations, then
	// an end. A small history limit makes ends spill into the ledger, so
	// the ledger's writes are killed too.
	crashStepsPerLifecycle = 5
	crashHistoryLimit      = 2

	// crashMaxDelay bounds the time between the child's "ready" and the
	// kill. Each request costs a couple of fsyncs (about a millisecond here)
	// and six run at once, so kills land at every point of a write; the
	// test reports how many left a temporary file behind.
	crashMaxDelay = 20 * time.Millisecond

	// crashChildLifetime ends a child whose parent died before killing it.
	crashChildLifetime = time.Minute
)

// crashVolumes are written concurrently by the child, one goroutine each.
// They include IDs that need escaping and one that needs a base32 name.
var crashVolumes = []string{
	"pvc-crash-0", "pvc-crash-1", "pvc-crash-2", "pvc-crash-3",
	"Crash/Ü..", strings.Repeat("\xfe", MaxVolumeIDLen),
}

func crashUID(lifecycle uint64) string { return fmt.Sprintf("lifecycle-%06d", lifecycle) }

// crashStep returns the request the child makes at step n of a volume.
// The generation is the step number, so a mark tells which step wrote it.
func crashStep(n uint64) (Kind, Token) {
	k := KindMutate
	if n%crashStepsPerLifecycle == crashStepsPerLifecycle-1 {
		k = KindEnd
	}
	return k, Token{UID: crashUID(n / crashStepsPerLifecycle), Generation: n}
}

// crashMarkAfter reports whether m is the mark step n leaves (n < 0: no
// step yet, so no mark).
func crashMarkAfter(m *Mark, n int64) bool {
	if n < 0 {
		return m == nil
	}
	if m == nil {
		return false
	}
	l := uint64(n) / crashStepsPerLifecycle
	k, tk := crashStep(uint64(n))
	phase, endedUpTo := PhaseActive, l // lifecycles [0, endedUpTo) have ended
	if k == KindEnd {
		phase, endedUpTo = PhaseEnded, l+1
	}
	var want []string
	for i := endedUpTo - min(endedUpTo, crashHistoryLimit); i < endedUpTo; i++ {
		want = append(want, crashUID(i))
	}
	var got []string
	for _, e := range m.History {
		got = append(got, e.UID)
	}
	return m.Phase == phase && m.UID == tk.UID && m.Generation == tk.Generation && slices.Equal(got, want)
}

// crashWriter is the child: it resumes each volume after the step its mark
// shows and writes "b <volume> <step>" before and "d <volume> <step>" after
// every request, each line in one write(2), until it is killed.
func crashWriter(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), crashChildLifetime)
	defer cancel()
	s, err := Open(ctx, dir, Options{HistoryLimit: crashHistoryLimit})
	if err != nil {
		return err
	}
	next := make([]uint64, len(crashVolumes))
	for i, vol := range crashVolumes {
		m, err := s.Get(ctx, vol)
		if err != nil {
			return err
		}
		if m != nil {
			next[i] = m.Generation + 1
		}
	}
	var outMu sync.Mutex
	emit := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		outMu.Lock()
		defer outMu.Unlock()
		os.Stdout.WriteString(line)
	}
	emit("ready\n")
	errs := make(chan error, len(crashVolumes))
	for i, vol := range crashVolumes {
		go func() {
			for n := next[i]; ctx.Err() == nil; n++ {
				k, tk := crashStep(n)
				emit("b %d %d\n", i, n)
				var err error
				if k == KindEnd {
					_, err = s.End(ctx, vol, tk)
				} else {
					_, err = s.Advance(ctx, vol, tk)
				}
				if err != nil {
					errs <- fmt.Errorf("volume %q step %d: %w", vol, n, err)
					return
				}
				emit("d %d %d\n", i, n)
			}
			errs <- nil
		}()
	}
	return <-errs
}

func crashKills(t *testing.T) int {
	v := os.Getenv(crashKillsEnv)
	if v == "" {
		return defaultCrashKills
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of kills", crashKillsEnv, v)
	}
	return n
}

func TestCrashLeavesOldOrNewMark(t *testing.T) {
	kills := crashKills(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	dir := t.TempDir()
	// acked[v] is the step whose mark the previous round verified on disk
	// (-1: none yet). The child resumes after it.
	acked := make([]int64, len(crashVolumes))
	for i := range acked {
		acked[i] = -1
	}
	var inFlight, tempLeft, steps int
	start := time.Now()
	for k := 0; k < kills; k++ {
		begun, done := runAndKill(t, dir, time.Duration(rng.Int64N(int64(crashMaxDelay))))

		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				tempLeft++ // a kill between renameio's create and rename
				break
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := Open(ctx, dir, Options{HistoryLimit: crashHistoryLimit})
		cancel()
		if err != nil {
			t.Fatalf("kill %d: the killed child's lock or files block Open: %v", k, err)
		}
		interrupted := false
		for v, vol := range crashVolumes {
			m, err := s.Get(context.Background(), vol)
			if err != nil {
				s.Close()
				t.Fatalf("kill %d (seed %d): volume %q: %v", k, seed, vol, err)
			}
			prev := acked[v]
			old := max(prev, done[v])
			switch {
			case crashMarkAfter(m, old):
				acked[v] = old
			case begun[v] > old && crashMarkAfter(m, begun[v]):
				acked[v] = begun[v]
			default:
				s.Close()
				t.Fatalf("kill %d (seed %d): volume %q holds %v; want the mark of step %d or of step %d in flight",
					k, seed, vol, m, old, begun[v])
			}
			if begun[v] > done[v] {
				interrupted = true
			}
			steps += int(max(done[v]-prev, 0))
		}
		if interrupted {
			inFlight++
		}
		checkEndedLifecyclesRefused(t, s, acked, rng)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills in %v (seed %d): %d interrupted a request, %d left a temporary file; %d acknowledged steps",
		kills, time.Since(start).Round(time.Millisecond), seed, inFlight, tempLeft, steps)
	if steps == 0 {
		t.Fatal("no child got a request acknowledged before it was killed")
	}
	if kills >= 10 && inFlight == 0 {
		t.Fatal("no kill interrupted a request: the test did not exercise a crash")
	}
}

// checkEndedLifecyclesRefused asks, for one random earlier lifecycle of each
// volume, whether it is still refused: through the mark's history or, for
// lifecycles spilled from it, through the ledger.
func checkEndedLifecyclesRefused(t *testing.T, s *Store, acked []int64, rng *rand.Rand) {
	t.Helper()
	for v, vol := range crashVolumes {
		if acked[v] < crashStepsPerLifecycle {
			continue
		}
		l := rng.Uint64N(uint64(acked[v]) / crashStepsPerLifecycle)
		_, err := s.Advance(context.Background(), vol, Token{UID: crashUID(l), Generation: 1 << 62})
		if RejectionReason(err) != ReasonLifecycleEnded {
			t.Fatalf("volume %q: ended lifecycle %d: %v, want LIFECYCLE_ENDED", vol, l, err)
		}
	}
}

// runAndKill starts a crash writer on dir, SIGKILLs it delay after it is
// ready, and returns per volume the last step it began and the last it saw
// acknowledged (-1: none).
func runAndKill(t *testing.T, dir string, delay time.Duration) (begun, done []int64) {
	t.Helper()
	cmd := child(t, "crash-writer", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	lines := make(chan []string)
	go func() {
		var got []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				continue
			}
			got = append(got, sc.Text())
		}
		lines <- got
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("crash writer did not get ready")
	}
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got := <-lines // the pipe must be drained before Wait closes it
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("crash writer ended by itself (%v) instead of being killed", err)
	}

	begun, done = make([]int64, len(crashVolumes)), make([]int64, len(crashVolumes))
	for i := range begun {
		begun[i], done[i] = -1, -1
	}
	for _, line := range got {
		var what string
		var v int
		var n int64
		if _, err := fmt.Sscanf(line, "%s %d %d", &what, &v, &n); err != nil || v < 0 || v >= len(crashVolumes) {
			t.Fatalf("crash writer wrote %q", line)
		}
		switch what {
		case "b":
			begun[v] = max(begun[v], n)
		case "d":
			done[v] = max(done[v], n)
		default:
			t.Fatalf("crash writer wrote %q", line)
		}
	}
	return begun, done
}
