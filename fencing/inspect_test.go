package fencing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestInspect: Inspect reads every mark, the ledger and the kept damaged
// files while a store holds the directory, and changes nothing.
func TestInspect(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{Now: func() time.Time { return t0 }})
	if _, err := s.Advance(ctx, "pvc-a", tok(uidA, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.End(ctx, "pvc-b", tok(uidB, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.End(ctx, "pvc-r", tok(uidC, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retire(ctx, RetireOptions{Keep: func(id string) bool { return id != "pvc-r" }}); err != nil {
		t.Fatal(err)
	}
	mustWriteMark(t, s, "pvc-c", active(uidC, 1, uidA))
	damage(t, s, "pvc-c", -1)
	if err := os.WriteFile(filepath.Join(dir, "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	inv, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, mf := range inv.Marks {
		ids = append(ids, mf.VolumeID)
	}
	if diff := cmp.Diff([]string{"pvc-a", "pvc-b", "pvc-c"}, ids); diff != "" {
		t.Fatalf("volumes (-want +got):\n%s", diff)
	}
	if !cmp.Equal(inv.Marks[0].Mark, active(uidA, 3)) || !cmp.Equal(inv.Marks[1].Mark, ended(uidB, 2, uidB)) {
		t.Errorf("marks: %v, %v", inv.Marks[0].Mark, inv.Marks[1].Mark)
	}
	c := inv.Marks[2]
	if c.Mark != nil || !errors.Is(c.Err, ErrCorruptMark) || c.Salvage == nil {
		t.Fatalf("damaged mark: %+v", c)
	}
	want := &Salvage{VolumeID: "pvc-c", Phase: PhaseActive, UID: uidC, Generation: 1, History: hist(uidA), Complete: true}
	if diff := cmp.Diff(want, c.Salvage, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("salvage (-want +got):\n%s", diff)
	}
	if inv.Retired != 1 || inv.LedgerErr != nil || len(inv.Damaged) != 0 {
		t.Errorf("ledger %d, %v; damaged %v", inv.Retired, inv.LedgerErr, inv.Damaged)
	}

	if _, err := s.ResetMark(ctx, "pvc-c", ResetOptions{Token: tok(uidC, 1), AcceptLoss: true}); err != nil {
		t.Fatal(err)
	}
	if inv, err = Inspect(dir); err != nil || len(inv.Damaged) != 1 || inv.Marks[2].Err != nil {
		t.Fatalf("after the reset: %+v, %v", inv, err)
	}

	mf, err := InspectMark(dir, "pvc-a")
	if err != nil || !cmp.Equal(mf.Mark, active(uidA, 3)) || mf.Path != s.path("pvc-a") {
		t.Errorf("InspectMark: %+v, %v", mf, err)
	}
	if mf, err := InspectMark(dir, "pvc-none"); err != nil || mf.Mark != nil || mf.Err != nil {
		t.Errorf("InspectMark of a volume without a mark: %+v, %v", mf, err)
	}
	if _, err := InspectMark(dir, ""); !errors.Is(err, ErrMalformed) {
		t.Errorf("InspectMark of an empty ID: %v", err)
	}

	// Nothing is created where there is no store.
	missing := filepath.Join(dir, "missing")
	if _, err := Inspect(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Inspect of a missing directory: %v", err)
	}
	if _, err := InspectMark(missing, "pvc-a"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("InspectMark of a missing directory: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Error("Inspect created the directory")
	}
}

// TestSalvageMark: the fields of a damaged file are read back as far as
// the file goes, and only those.
func TestSalvageMark(t *testing.T) {
	m := active(uidA, 42, uidB, uidC)
	data, err := encodeMark("pvc-1", m)
	if err != nil {
		t.Fatal(err)
	}
	if sv := salvageMark(data); sv == nil || !sv.ChecksumOK || !sv.Complete || sv.UID != uidA || len(sv.History) != 2 {
		t.Fatalf("intact file: %+v", sv)
	}
	// Cut in the middle of the second history entry: the first one and
	// every field before it are read, nothing more.
	cut := len(data) - 4 - 8 - 3
	sv := salvageMark(data[:cut])
	if sv == nil || sv.Complete || sv.ChecksumOK || sv.UID != uidA || sv.Generation != 42 || len(sv.History) != 1 || sv.History[0].UID != uidB {
		t.Fatalf("truncated file: %+v", sv)
	}
	// Cut inside the UID: the UID is not made up of zeros.
	sv = salvageMark(data[:4+1+1+8+1+len("pvc-1")+1+5])
	if sv == nil || sv.UID != "" || sv.VolumeID != "pvc-1" {
		t.Fatalf("file cut in the UID: %+v", sv)
	}
	for _, bad := range [][]byte{nil, []byte("PCFM"), []byte("XXXX\x01aaaaaaaaaaaaaaaaaaaa"), append([]byte("PCFM\x02"), data[5:]...)} {
		if sv := salvageMark(bad); sv != nil {
			t.Errorf("salvaged %q: %+v", bad, sv)
		}
	}
}

// FuzzSalvageMark: salvaging never panics, and a file that decodes is
// salvaged to the same fields.
func FuzzSalvageMark(f *testing.F) {
	data, _ := encodeMark("pvc-1", active(uidA, 42, uidB))
	f.Add(data)
	f.Add(data[:20])
	f.Fuzz(func(t *testing.T, data []byte) {
		sv := salvageMark(data)
		id, m, err := decodeMark(data)
		if err != nil {
			return
		}
		if sv == nil || !sv.ChecksumOK || !sv.Complete || sv.VolumeID != id || sv.UID != m.UID || sv.Generation != m.Generation || len(sv.History) != len(m.History) {
			t.Fatalf("a valid mark %v salvaged as %+v", m, sv)
		}
	})
}

func TestSalvageLedger(t *testing.T) {
	l, _ := (&ledger{}).with([]fingerprint{fingerprintOf("a", "1"), fingerprintOf("b", "2"), fingerprintOf("c", "3")})
	data := l.encode()
	for _, tc := range []struct {
		name      string
		data      []byte
		records   int
		announced int64
	}{
		{"intact", data, 3, 3},
		{"cut in the checksum", data[:len(data)-2], 3, 3},
		{"cut in the last record", data[:len(data)-4-1], 2, 3},
		{"header only", data[:ledgerHeaderLen], 0, 3},
		{"no header", []byte("PC"), 0, -1},
	} {
		got, announced := salvageLedger(tc.data)
		if len(got.fps) != tc.records || announced != tc.announced {
			t.Errorf("%s: %d records, announced %d; want %d, %d", tc.name, len(got.fps), announced, tc.records, tc.announced)
		}
	}
	got, _ := salvageLedger(data)
	if !cmp.Equal(got.fps, l.fps) {
		t.Error("salvage of an intact ledger differs from it")
	}
}
