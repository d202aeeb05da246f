package server

import (
	"log/slog"
	"testing"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
)

// TestStatsAfterRestart: a restarted agent counts the volumes that exist
// (their lifecycles are live in the fencing marks) and the exports that
// survived in configfs, instead of starting from zero.
func TestStatsAfterRestart(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"pvc-a", "pvc-b", "pvc-c"} {
		if _, err := h.create(id, tok(uid1, 1), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.export("pvc-a", tok(uid1, 2), false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-c", Store: lvmStore}); err != nil {
		t.Fatal(err)
	}
	if s := h.srv.Stats(); s.Volumes != 2 || s.Exports != 1 {
		t.Fatalf("before the restart: %+v, want 2 volumes, 1 export", s)
	}

	h.srv.Close()
	srv, err := newServer(Config{GenerationsDir: h.gen, ConfigfsRoot: t.TempDir(), Logger: slog.New(slog.DiscardHandler)},
		h.nv, func(storeSpec) (backends.Backend, error) { return h.be, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if s := srv.Stats(); s.Volumes != 2 || s.Exports != 1 {
		t.Errorf("after the restart: %+v, want 2 volumes, 1 export", s)
	}
}
