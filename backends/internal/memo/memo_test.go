package memo

import (
	"sync"
	"testing"
)

func TestMap(t *testing.T) {
	var m Map[int]
	if _, ok := m.Get("a"); ok {
		t.Fatal("the zero Map remembers a")
	}
	m.Set("a", 1)
	m.Set("b", 2)
	m.Set("a", 3)
	if v, ok := m.Get("a"); !ok || v != 3 {
		t.Fatalf("a: %d, %v; want 3, true", v, ok)
	}
	m.Forget("a")
	m.Forget("never")
	if _, ok := m.Get("a"); ok {
		t.Fatal("a remembered after Forget")
	}
	if v, ok := m.Get("b"); !ok || v != 2 {
		t.Fatalf("b: %d, %v; want 2, true", v, ok)
	}
	// Concurrent use (under -race).
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			m.Set("c", i)
			m.Get("c")
			m.Forget("c")
		})
	}
	wg.Wait()
}
