package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// poolRunner answers every lvs of the volume group or the pool with one thin pool of 256 MiB
// whose lv_attr is attr (the lab's report of a pool with zeroing on is
// "twi-a-tz--", off "twi-a-t---"), an lvs of any other LV as LVM does for
// one that does not exist, and records every other command without running
// it.
type poolRunner struct {
	attr  string
	mu    sync.Mutex
	other []string
}

func (r *poolRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if lv := args[len(args)-1]; name == "lvm" && args[0] == "lvs" && strings.HasPrefix(lv, "vg0/") && lv != "vg0/thinpool" {
		return nil, &command.Error{Cmd: append([]string{name}, args...), ExitCode: 5, Err: errors.New("exit status 5"),
			Stderr: fmt.Sprintf("  Failed to find logical volume %q\n", lv)}
	}
	if name == "lvm" && len(args) > 0 && args[0] == "lvs" {
		return fmt.Appendf(nil, `{"report": [{"lv": [{"lv_name":"thinpool", "lv_size":"268435456", "lv_tags":"", "lv_attr":%q, "pool_lv":"", `+
			`"lv_dm_path":"/dev/mapper/vg0-thinpool", "lv_kernel_major":"254", "lv_kernel_minor":"2", "vg_extent_size":"4194304"}]}]}`, r.attr), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.other = append(r.other, name+" "+strings.Join(args, " "))
	return nil, fmt.Errorf("not run: %s", name)
}

// RunInput answers as Run: no LVM command takes standard input.
func (r *poolRunner) RunInput(ctx context.Context, _ []byte, name string, args ...string) ([]byte, error) {
	return r.Run(ctx, name, args...)
}

// TestUnzeroedThinPool: the PillarStore's opt-out reaches the LVM backend,
// and a refused thin pool is FAILED_PRECONDITION with a StoreRefusal
// detail and a message that says what to do, from GetCapacity and from
// CreateVolume before anything is created.
func TestUnzeroedThinPool(t *testing.T) {
	store := func(allow bool) *agentv1.Store {
		return &agentv1.Store{Name: "thin", Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{
			VolumeGroup: "vg0", ThinPool: "thinpool", AllowUnzeroedThinPool: allow}}}
	}
	for _, c := range []struct {
		attr    string
		allow   bool
		refused bool
	}{
		{"twi-a-t---", false, true},
		{"twi-a-t---", true, false},
		{"twi-a-tz--", false, false},
	} {
		name := fmt.Sprintf("%s allow=%v", c.attr, c.allow)
		r := &poolRunner{attr: c.attr}
		srv, err := newServer(Config{GenerationsDir: filepath.Join(t.TempDir(), "generations"), ConfigfsRoot: t.TempDir(),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, newFakeNvmet(), realBackends(r, nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })

		capResp, err := srv.GetCapacity(ctxT(t), &agentv1.GetCapacityRequest{Store: store(c.allow)})
		_, createErr := srv.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1",
			Store: store(c.allow), CapacityBytes: 1 << 20})
		if !c.refused {
			if err != nil || capResp.GetTotalBytes() != 256<<20 {
				t.Errorf("%s: GetCapacity = %v, %v; want 256 MiB", name, capResp, err)
			}
			// The create got past the check to lvcreate, which the
			// runner does not run.
			if len(r.other) != 1 || !strings.HasPrefix(r.other[0], "lvm lvcreate ") {
				t.Errorf("%s: commands after lvs: %q, want one lvcreate", name, r.other)
			}
			continue
		}
		for what, err := range map[string]error{"GetCapacity": err, "CreateVolume": createErr} {
			ref, ok := agentv1.StoreRefusalOf(err)
			if status.Code(err) != codes.FailedPrecondition || !ok || ref.GetReason() != agentv1.StoreRefusal_REASON_THIN_POOL_NOT_ZEROING {
				t.Errorf("%s: %s = %v (detail %v), want FAILED_PRECONDITION with REASON_THIN_POOL_NOT_ZEROING", name, what, err, ref)
				continue
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, "lvchange --zero y vg0/thinpool") {
				t.Errorf("%s: %s message %q does not say what to do", name, what, msg)
			}
		}
		if len(r.other) != 0 {
			t.Errorf("%s: commands ran in a refused pool: %q", name, r.other)
		}
	}
}

// TestStoreCacheBounded: the agent keeps a backend for at most maxStores
// configurations; the one used least recently makes room, one in use
// stays the same object.
func TestStoreCacheBounded(t *testing.T) {
	built := 0
	c := newStoreCache(func(storeSpec) (backends.Backend, error) { built++; return newFakeBackend(t.TempDir()), nil }, 1)
	spec := func(i int) storeSpec { return storeSpec{kind: kindLVM, volumeGroup: fmt.Sprintf("vg%d", i)} }
	inUse, err := c.get(spec(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3*maxStores; i++ {
		if _, err := c.get(spec(i)); err != nil {
			t.Fatal(err)
		}
		again, _ := c.get(spec(0)) // the store in use keeps being used
		if again != inUse {
			t.Fatalf("after %d other configurations, the store in use got a new backend", i)
		}
	}
	if len(c.m) != maxStores {
		t.Errorf("%d configurations cached, want at most %d", len(c.m), maxStores)
	}
	if built != 3*maxStores {
		t.Errorf("built %d backends, want %d (one per configuration)", built, 3*maxStores)
	}
	if _, err := c.get(spec(1)); err != nil || built != 3*maxStores+1 {
		t.Errorf("a dropped configuration was not built again: %v, built %d", err, built)
	}
}
