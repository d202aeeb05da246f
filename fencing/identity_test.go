package fencing

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestIdentity: a store draws its identity when first opened and keeps it
// across reopenings and whatever happens to its marks; a store made by a
// release without identities gets one; another directory, or this one
// wiped, is another store; a damaged identity file fails closed.
func TestIdentity(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openTest(t, dir, Options{Now: func() time.Time { return t0 }})
	id := s.ID()
	if !validIdentity(id) {
		t.Fatalf("ID() = %q, not 32 lower-case hex digits", id)
	}
	if _, err := s.Advance(ctx, "pvc-1", tok(uidA, 1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if again := openTest(t, dir, Options{}); again.ID() != id {
		t.Errorf("reopened store has identity %q, want %q", again.ID(), id)
	} else {
		again.Close()
	}
	if other := openTest(t, t.TempDir(), Options{}); other.ID() == id {
		t.Error("two directories share an identity")
	} else {
		other.Close()
	}

	// A store of an older release: marks, no identity.
	if err := os.Remove(filepath.Join(dir, IdentityFileName)); err != nil {
		t.Fatal(err)
	}
	older := openTest(t, dir, Options{})
	if older.ID() == id || !validIdentity(older.ID()) {
		t.Errorf("store without an identity file got %q", older.ID())
	}
	if m, err := older.Get(ctx, "pvc-1"); err != nil || m == nil {
		t.Errorf("its marks: %v, %v", m, err)
	}
	older.Close()

	if err := os.WriteFile(filepath.Join(dir, IdentityFileName), []byte("not an identity\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrCorruptMark) {
		t.Errorf("Open with a damaged identity: %v, want ErrCorruptMark", err)
	}
}
