// Package replaytest replays the captures the kernel suite recorded
// (tests/kernel/backends, -backends.capture) against a backend in unit
// tests: each case names a capture label, calls the backend over a runner
// that expects exactly the captured commands, and checks the result.
package replaytest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
)

// Case is one backend call answered by the captures DIR/LABEL.N.txt.
type Case struct {
	Label string
	// Missing selects the backend of a store that does not exist.
	Missing bool
	// Setup, if set, adjusts the backend before the call.
	Setup func(b backends.Backend)
	Call  func(ctx context.Context, b backends.Backend) (any, error)
	// Want is the result when Err is nil.
	Want any
	// Err is the sentinel the error must wrap, or nil for success.
	Err error
}

// NewBackend builds the backend under test over r.
type NewBackend func(t *testing.T, missing bool, r command.InputRunner) backends.Backend

// Run replays every case in its own subtest, then checks that every
// capture label in dir was replayed by some case.
func Run(t *testing.T, dir string, newBackend NewBackend, cases []Case) {
	t.Helper()
	used := map[string]bool{}
	for _, c := range cases {
		used[c.Label] = true
		t.Run(c.Label, func(t *testing.T) {
			r := commandtest.Replay(t, filepath.Join(dir, c.Label))
			b := newBackend(t, c.Missing, r)
			if c.Setup != nil {
				c.Setup(b)
			}
			got, err := c.Call(context.Background(), b)
			if c.Err != nil {
				if !errors.Is(err, c.Err) {
					t.Fatalf("error %v, want %v", err, c.Err)
				}
				if be := (*backends.Error)(nil); !errors.As(err, &be) {
					t.Fatalf("error %v (%T) is not a *backends.Error", err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.Want) {
				t.Fatalf("got %#v\nwant %#v", got, c.Want)
			}
		})
	}
	for _, l := range Labels(t, dir) {
		if !used[l] {
			t.Errorf("captures %s/%s.N.txt are replayed by no case", dir, l)
		}
	}
}

var captureName = regexp.MustCompile(`^(.+)\.[0-9]+\.txt$`)

// Labels returns the capture labels in dir.
func Labels(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, e := range ents {
		if m := captureName.FindStringSubmatch(e.Name()); m != nil && !slices.Contains(labels, m[1]) {
			labels = append(labels, m[1])
		}
	}
	return labels
}

// The calls of the cases, one per Backend method.

// Create calls b.Create(ctx, id, size).
func Create(id string, size int64) func(context.Context, backends.Backend) (any, error) {
	return func(ctx context.Context, b backends.Backend) (any, error) { return b.Create(ctx, id, size) }
}

// Expand calls b.Expand(ctx, id, size).
func Expand(id string, size int64) func(context.Context, backends.Backend) (any, error) {
	return func(ctx context.Context, b backends.Backend) (any, error) { return b.Expand(ctx, id, size) }
}

// Get calls b.Get(ctx, id).
func Get(id string) func(context.Context, backends.Backend) (any, error) {
	return func(ctx context.Context, b backends.Backend) (any, error) { return b.Get(ctx, id) }
}

// Delete calls b.Delete(ctx, id); the result is nil.
func Delete(id string) func(context.Context, backends.Backend) (any, error) {
	return func(ctx context.Context, b backends.Backend) (any, error) { return nil, b.Delete(ctx, id) }
}

// DevicePath calls b.DevicePath(ctx, id).
func DevicePath(id string) func(context.Context, backends.Backend) (any, error) {
	return func(ctx context.Context, b backends.Backend) (any, error) { return b.DevicePath(ctx, id) }
}

// Capacity calls b.Capacity(ctx).
func Capacity(ctx context.Context, b backends.Backend) (any, error) { return b.Capacity(ctx) }

// List calls b.List(ctx).
func List(ctx context.Context, b backends.Backend) (any, error) { return b.List(ctx) }

// CreateAsync starts b.Create(id, size) and returns where its error
// arrives: for tests of creates that run side by side.
func CreateAsync(b backends.Backend, id string, size int64) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := b.Create(context.Background(), id, size)
		errc <- err
	}()
	return errc
}
