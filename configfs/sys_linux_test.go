package configfs

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func dirent(name string, typ byte) []byte {
	reclen := (19 + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint16(b[16:18], uint16(reclen))
	b[18] = typ
	copy(b[19:], name)
	return b
}

func TestParseDirents(t *testing.T) {
	var buf []byte
	for _, d := range []struct {
		name string
		typ  byte
	}{{".", unix.DT_DIR}, {"..", unix.DT_DIR}, {"attr_model", unix.DT_REG}, {"namespaces", unix.DT_DIR},
		{"nqn.2014-08.org.example:h", unix.DT_LNK}, {"odd", unix.DT_UNKNOWN}, {"pipe", unix.DT_FIFO}} {
		buf = append(buf, dirent(d.name, d.typ)...)
	}
	got, unknown := parseDirents(buf, nil, nil)
	want := []dirEntry{{name: "attr_model", file: true}, {name: "namespaces", dir: true},
		{name: "nqn.2014-08.org.example:h", link: true}, {name: "odd"}, {name: "pipe"}}
	if len(got) != len(want) || len(unknown) != 1 || unknown[0] != 3 {
		t.Fatalf("parseDirents = %+v, unknown %v", got, unknown)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func FuzzParseDirents(f *testing.F) {
	f.Add(append(dirent("a", unix.DT_REG), dirent("b", unix.DT_DIR)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Never panics, never reports more entries than records fit.
		got, _ := parseDirents(b, nil, nil)
		if len(got) > len(b)/19 {
			t.Fatalf("%d entries from %d bytes", len(got), len(b))
		}
	})
}

func TestRetry(t *testing.T) {
	var slept []time.Duration
	defer func(f func(time.Duration)) { sleep = f }(sleep)
	sleep = func(d time.Duration) { slept = append(slept, d) }
	failing := func(errs ...error) func() error {
		return func() error {
			if len(errs) == 0 {
				return nil
			}
			err := errs[0]
			errs = errs[1:]
			return err
		}
	}
	restarts := func(n int) []error {
		errs := make([]error, n)
		for i := range errs {
			errs[i] = errRestartSys
		}
		return errs
	}
	for _, c := range []struct {
		name  string
		errs  []error
		want  error
		naps  int
		first time.Duration
	}{
		{"EINTR is retried at once", []error{unix.EINTR, unix.EINTR}, nil, 0, 0},
		{"ERESTARTSYS is retried after a pause", restarts(3), nil, 3, restartDelay},
		{"ERESTARTSYS gives up after maxRestarts", restarts(maxRestarts + 1), errRestartSys, maxRestarts, restartDelay},
		{"another error is returned at once", []error{unix.EBUSY}, unix.EBUSY, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			slept = nil
			if err := retry(failing(c.errs...)); err != c.want {
				t.Errorf("retry = %v, want %v", err, c.want)
			}
			if len(slept) != c.naps {
				t.Fatalf("slept %v, want %d pauses", slept, c.naps)
			}
			for i, d := range slept {
				if d > restartMaxDelay || (i == 0 && d != c.first) || (i > 0 && d < slept[i-1]) {
					t.Errorf("pauses %v: want from %v, growing, at most %v", slept, c.first, restartMaxDelay)
					break
				}
			}
		})
	}
}
