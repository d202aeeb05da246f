package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHandToPeer plays both guests over a directory: the main guest's
// handToPeer returns once the peer's importHanded answered, with the
// peer's error when the import failed, and at once when the peer failed
// altogether; a boot imports every tarball again.
func TestHandToPeer(t *testing.T) {
	dir := t.TempDir()
	src := t.TempDir()
	tarball := func(name, body string) string {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var mu sync.Mutex
	var imported []string
	imp := func(_ context.Context, p string) error {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if string(b) == "broken" {
			return errors.New("ctr: unexpected EOF")
		}
		mu.Lock()
		imported = append(imported, filepath.Base(p))
		mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	peer := make(chan struct{})
	go func() {
		defer close(peer)
		for ctx.Err() == nil {
			_ = importHanded(ctx, dir, false, imp)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	noFailure := func() error { return nil }

	if err := handToPeer(ctx, dir, tarball("busybox-1.tar", "ok"), 10*time.Second, noFailure); err != nil {
		t.Fatalf("hand over a good tarball: %v", err)
	}
	err := handToPeer(ctx, dir, tarball("agnhost-2.tar", "broken"), 10*time.Second, noFailure)
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") || !strings.Contains(err.Error(), "agnhost-2.tar") {
		t.Fatalf("hand over a tarball the peer cannot import: %v", err)
	}
	cancel()
	<-peer
	mu.Lock()
	if strings.Join(imported, ",") != "busybox-1.tar" {
		t.Errorf("the peer imported %v, want busybox-1.tar once", imported)
	}
	imported = nil
	mu.Unlock()

	// Nobody answers: a peer that failed ends the wait with its error.
	down := errors.New("the peer guest could not join: boom")
	start := time.Now()
	if err := handToPeer(context.Background(), dir, tarball("busybox-3.tar", "ok"), time.Minute, func() error { return down }); !errors.Is(err, down) {
		t.Fatalf("hand over to a failed peer: %v, want %v", err, down)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("handToPeer waited %v for a failed peer", d)
	}

	// A boot imports everything handed over, answered or not, and says
	// which failed.
	if err := importHanded(context.Background(), dir, true, imp); err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("boot import: %v, want the broken tarball's error", err)
	}
	if strings.Join(imported, ",") != "busybox-1.tar,busybox-3.tar" {
		t.Errorf("the boot imported %v, want busybox-1.tar,busybox-3.tar", imported)
	}
	if _, err := os.Stat(filepath.Join(dir, "busybox-3.tar"+peerImported)); err != nil {
		t.Errorf("the boot left no marker: %v", err)
	}
}
