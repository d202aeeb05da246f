package zfs

import (
	"testing"
	"time"
)

func TestAdmission(t *testing.T) {
	now := time.Unix(1e9, 0)
	a := admission{now: func() time.Time { return now }}
	if a.admits(1) {
		t.Fatal("admits without a listing")
	}
	a.record(100)
	if !a.admits(100) || a.admits(101) {
		t.Fatalf("a listing of 100: admits(100) %v, admits(101) %v; want true, false", a.admits(100), a.admits(101))
	}
	a.take(60)
	if a.available != 40 || a.admits(41) || !a.admits(40) {
		t.Fatalf("after taking 60 of 100: available %d, admits(41) %v, admits(40) %v", a.available, a.admits(41), a.admits(40))
	}
	a.take(60)
	if a.available != 0 {
		t.Fatalf("taking more than the figure left %d, want 0", a.available)
	}
	a.record(100)
	now = now.Add(AdmissionMaxAge - time.Nanosecond)
	if !a.admits(1) {
		t.Fatal("a listing just younger than AdmissionMaxAge does not admit")
	}
	now = now.Add(time.Nanosecond)
	if a.admits(1) {
		t.Fatal("a listing AdmissionMaxAge old admits")
	}
	a.record(100)
	a.forget()
	if a.admits(1) {
		t.Fatal("a forgotten listing admits")
	}
}
