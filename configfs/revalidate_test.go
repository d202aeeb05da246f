package configfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestRevalidateSize(t *testing.T) {
	sim, fs := newKernelSim(t)
	ctx := context.Background()
	e := fullExport(t, 1)
	mustApply(t, fs, e)
	nsid := e.Namespaces[0].NSID
	sim.mutations()
	if err := fs.RevalidateSize(ctx, e.NQN, nsid); err != nil {
		t.Fatal(err)
	}
	want := "write subsystems/" + e.NQN + "/namespaces/" + uitoa(uint64(nsid)) + "/revalidate_size=1"
	if got := sim.mutations(); !slices.Equal(got, []string{want}) {
		t.Errorf("RevalidateSize wrote %q, want %q", got, want)
	}

	for _, tc := range []struct {
		what string
		nqn  string
		nsid uint32
		ok   func(error) bool
	}{
		{"a reserved NSID", e.NQN, 0, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"a bad NQN", "not an nqn", 1, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"a missing namespace", e.NQN, nsid + 1, IsNotExist},
		{"a missing subsystem", fullExport(t, 2).NQN, 1, IsNotExist},
	} {
		if err := fs.RevalidateSize(ctx, tc.nqn, tc.nsid); !tc.ok(err) {
			t.Errorf("RevalidateSize of %s = %v", tc.what, err)
		}
	}
	if got := sim.mutations(); len(got) != 0 {
		t.Errorf("failed revalidations wrote %q", got)
	}

	// A kernel before 5.11 has no revalidate_size.
	attr := filepath.Join(sim.root, "nvmet", "subsystems", e.NQN, "namespaces", uitoa(uint64(nsid)), "revalidate_size")
	if err := os.Remove(attr); err != nil {
		t.Fatal(err)
	}
	if err := fs.RevalidateSize(ctx, e.NQN, nsid); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("RevalidateSize without the attribute = %v, want ErrUnsupported", err)
	}
	if err := os.WriteFile(attr, nil, 0o200); err != nil {
		t.Fatal(err)
	}

	// The kernel refuses it on a disabled namespace.
	e.Namespaces[0].Enabled = false
	mustApply(t, fs, e)
	if err := fs.RevalidateSize(ctx, e.NQN, nsid); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("RevalidateSize of a disabled namespace = %v, want EINVAL", err)
	}
}

func TestRevalidateSizeWithoutNvmet(t *testing.T) {
	fs := NewFS(t.TempDir())
	if err := fs.RevalidateSize(context.Background(), fullExport(t, 1).NQN, 1); !IsNotExist(err) {
		t.Errorf("RevalidateSize without nvmet = %v, want IsNotExist", err)
	}
}
