package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStoreSlots(t *testing.T) {
	be := newFakeBackend(t.TempDir())
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	be.blockCh, be.enteredCh = block, entered
	l := limit(be, 1)
	done := make(chan error, 1)
	go func() { _, err := l.Create(context.Background(), "pvc-a", 4096); done <- err }()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := l.Get(ctx, "pvc-b")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call waiting for the only slot = %v, want the deadline", err)
	}
	if got := status.Code(toStatus(ctx, "GetCapacity", "", err)); got != codes.DeadlineExceeded {
		t.Errorf("mapped to %v, want DeadlineExceeded", got)
	}
	if len(be.calls) != 0 {
		t.Errorf("the queued call reached the backend: %v", be.calls)
	}
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(context.Background(), "pvc-a"); err != nil {
		t.Errorf("after the slot was freed: %v", err)
	}
}
