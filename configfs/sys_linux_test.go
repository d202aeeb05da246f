package configfs

import (
	"encoding/binary"
	"testing"

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
