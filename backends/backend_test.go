package backends_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
)

func TestValidateVolumeID(t *testing.T) {
	for _, id := range []string{"a", "0", "pvc-0f8e2a", "a.b-c", strings.Repeat("x", backends.MaxVolumeIDLength)} {
		if err := backends.ValidateVolumeID(id); err != nil {
			t.Errorf("ValidateVolumeID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "-a", "a-", ".a", "a.", "A", "a_b", "a/b", "a b", "a:b", "é", strings.Repeat("x", backends.MaxVolumeIDLength+1)} {
		err := backends.ValidateVolumeID(id)
		if !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("ValidateVolumeID(%q) = %v, want ErrInvalidArgument", id, err)
		}
	}
}

func TestRoundUp(t *testing.T) {
	for _, c := range []struct{ size, unit, want int64 }{
		{1, 512, 512},
		{512, 512, 512},
		{513, 512, 1024},
		{10000000, 8192, 10002432}, // what zfs create -V 10000000 made in the lab
		{10000000, 16384, 10010624},
		{math.MaxInt64 - 4095, 4096, math.MaxInt64 - 4095},
	} {
		got, err := backends.RoundUp(c.size, c.unit)
		if err != nil || got != c.want {
			t.Errorf("RoundUp(%d, %d) = %d, %v; want %d", c.size, c.unit, got, err, c.want)
		}
	}
	for _, c := range []struct{ size, unit int64 }{{0, 512}, {-1, 512}, {1, 0}, {1, -512}, {math.MaxInt64, 4096}} {
		if _, err := backends.RoundUp(c.size, c.unit); !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("RoundUp(%d, %d): %v, want ErrInvalidArgument", c.size, c.unit, err)
		}
	}
}

func FuzzRoundUp(f *testing.F) {
	f.Add(int64(10000000), int64(8192))
	f.Add(int64(math.MaxInt64), int64(1))
	f.Fuzz(func(t *testing.T, size, unit int64) {
		got, err := backends.RoundUp(size, unit)
		if err != nil {
			if size > 0 && unit > 0 && size <= math.MaxInt64-(unit-1) {
				t.Fatalf("RoundUp(%d, %d) refused: %v", size, unit, err)
			}
			return
		}
		if got < size || got-size >= unit || got%unit != 0 {
			t.Fatalf("RoundUp(%d, %d) = %d: not the next multiple", size, unit, got)
		}
	})
}

func TestAvailable(t *testing.T) {
	for _, c := range []struct {
		physical, promised int64
		ratio              float64
		want               int64
	}{
		{1000, 0, 1, 1000},
		{1000, 400, 1, 600},
		{1000, 1000, 1, 0},
		{1000, 1500, 1, 0},   // already overcommitted: nothing left, never negative
		{1000, 1500, 2, 500}, // ratio 2: twice the pool may be promised
		{1000, 0, 0.5, 1000}, // below 1 counts as 1
		{1000, 0, math.NaN(), 1000},
		{1000, -5, 1, 1000},
		{math.MaxInt64, 0, 4, math.MaxInt64}, // saturates
	} {
		if got := backends.Available(c.physical, c.promised, c.ratio); got != c.want {
			t.Errorf("Available(%d, %d, %g) = %d, want %d", c.physical, c.promised, c.ratio, got, c.want)
		}
	}
}

func FuzzAvailable(f *testing.F) {
	f.Add(int64(1<<30), int64(1<<29), 1.5)
	f.Fuzz(func(t *testing.T, physical, promised int64, ratio float64) {
		if physical < 0 {
			return // the tools never report a negative size
		}
		got := backends.Available(physical, promised, ratio)
		if got < 0 {
			t.Fatalf("Available(%d, %d, %g) = %d < 0", physical, promised, ratio, got)
		}
		if (ratio <= 1 || math.IsNaN(ratio)) && got > physical {
			t.Fatalf("Available(%d, %d, %g) = %d exceeds the pool without overcommit", physical, promised, ratio, got)
		}
	})
}

func TestErrorChain(t *testing.T) {
	cause := errors.New("exit status 5")
	err := error(&backends.Error{Op: "create", Store: "vg0/thinpool", Volume: "pvc-1",
		Err: errors.Join(backends.ErrNoSpace, cause)})
	if !backends.IsNoSpace(err) || !errors.Is(err, cause) || backends.IsNotFound(err) {
		t.Fatalf("chain of %v lost its sentinel or cause", err)
	}
	if want := "backends: create in vg0/thinpool volume pvc-1: "; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("message %q, want prefix %q", err, want)
	}
}
