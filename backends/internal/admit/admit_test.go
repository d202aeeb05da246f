package admit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

func TestReservationEnds(t *testing.T) {
	exited := &command.Error{ExitCode: 1, Err: errors.New("exit status 1")}
	killed := &command.Error{ExitCode: -1, Err: context.DeadlineExceeded}
	for _, c := range []struct {
		name string
		err  error
		used bool
	}{
		{"succeeded", nil, true},
		{"exited with an error", exited, false},
		{"killed", killed, true},
		{"panicked", ErrPanicked, true},
	} {
		var l Lock
		r, err := l.Reserve(func(reserved int64) (int64, error) { return 10, nil })
		if err != nil {
			t.Fatal(err)
		}
		var seen int64
		if _, err := l.Reserve(func(reserved int64) (int64, error) { seen = reserved; return 0, errors.New("no") }); err == nil {
			t.Fatal("a refused decision reserved")
		}
		if seen != 10 {
			t.Errorf("%s: a decision beside the running change saw %d bytes reserved, want 10", c.name, seen)
		}
		var used int64
		r.End(c.err, func(n int64) { used += n })
		r.End(c.err, func(n int64) { used += n }) // a second End does nothing
		if want := map[bool]int64{true: 10, false: 0}[c.used]; used != want {
			t.Errorf("%s: %d bytes used, want %d", c.name, used, want)
		}
		if n := l.Reserved(); n != 0 {
			t.Errorf("%s: %d bytes still reserved after End", c.name, n)
		}
	}
	var none *Reservation
	none.End(nil, func(int64) { t.Error("a nil reservation used bytes") })
}

func TestWaitingCountsCallersBehindTheLock(t *testing.T) {
	var l Lock
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{}, 3)
	go func() {
		_, _ = l.Reserve(func(int64) (int64, error) { close(inside); <-release; return 0, nil })
		done <- struct{}{}
	}()
	<-inside
	if n := l.Waiting(); n != 0 {
		t.Fatalf("Waiting() = %d with one caller holding the lock, want 0", n)
	}
	for range 2 {
		go func() {
			_, _ = l.Reserve(func(int64) (int64, error) { return 0, nil })
			done <- struct{}{}
		}()
	}
	for deadline := time.Now().Add(time.Minute); l.Waiting() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Waiting() = %d after a minute, want 2", l.Waiting())
		}
	}
	close(release)
	for range 3 {
		<-done
	}
	if n := l.Waiting(); n != 0 {
		t.Errorf("Waiting() = %d after every caller returned, want 0", n)
	}
}
