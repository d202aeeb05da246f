package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, "%d\n", i) })
		_ = b.String() // read while others write (go test -race)
	}
	wg.Wait()
	if b.Len() != 16 || len(b.Bytes()) != 16 {
		t.Fatalf("8 writes of 2 bytes: Len %d, Bytes %d", b.Len(), len(b.Bytes()))
	}
	n := b.Len()
	fmt.Fprint(&b, "tail")
	if got := b.From(n); got != "tail" {
		t.Errorf("From(%d) = %q, want tail", n, got)
	}
	if got := b.From(1 << 20); got != "" {
		t.Errorf("From past the end = %q", got)
	}
}
