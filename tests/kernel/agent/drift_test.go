//go:build kernel

package agent

import (
	"bytes"
	"context"
	"testing"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// TestDriftRestoredWhileWriting: a host writes to an export while the
// whole nvmet tree is wiped under the running agent (as `nvmetcli clear`
// does). The agent's drift check, run every 500 ms as -drift-interval
// would, puts the export back as it was; the host, with the kernel's
// default reconnect options, reconnects and every write and fsync
// succeeds, and what it wrote reads back.
func TestDriftRestoredWhileWriting(t *testing.T) {
	guest.RequireGuest(t)
	zv := newZFS(t)
	requireEmptyNvmet(t)
	a := startAgent(t, t.TempDir())
	port := fixture.FreeTCPPort(t)
	const id = "pvc-drift"
	tk := tok(fixture.RandomUUID(t), 1)
	mustCreateExport(t, a.c, zv, id, tk, port, true)
	if _, err := a.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tk, VolumeId: id, HostNqn: hostA}); err != nil {
		t.Fatal(err)
	}
	before := readNvmet(t)
	ident, _ := export.For(id)
	fixture.MustConnect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: hostA})
	dev := fixture.NamespaceByUUID(t, ident.UUID)

	w := startDirectWriter(t, dev, 0, 64<<10)
	w.waitWrites(t, 10)

	wiped := time.Now()
	wipeNvmet(t)
	var took time.Duration
	fixture.WaitFor(t, "the agent to restore the export", 30*time.Second, func() bool {
		n, err := a.srv.RestoreDrift(context.Background())
		if err != nil {
			t.Fatalf("RestoreDrift: %v", err)
		}
		if n == 1 {
			took = time.Since(wiped)
			return true
		}
		time.Sleep(500 * time.Millisecond)
		return false
	})
	t.Logf("export restored %v after the wipe", took.Round(time.Millisecond))
	want, _ := before.Export(ident.SubsystemNQN)
	if got, ok := readNvmet(t).Export(ident.SubsystemNQN); !ok || !equalExports(got, want) {
		t.Errorf("the export after the restore:\n got %+v\nwant %+v", got, want)
	}
	w.waitWrites(t, w.count()+10)
	t.Logf("the host resumed writing %v after the wipe", time.Since(wiped).Round(time.Millisecond))
	pause, _ := w.stop(t)
	t.Logf("the host's longest pause between two writes: %v", pause.Round(time.Millisecond))
	last := w.last()
	if got := fixture.ReadAt(t, dev, last.off, len(last.data)); !bytes.Equal(got, last.data) {
		t.Errorf("the last write, at %d, does not read back", last.off)
	}
	if n := a.srv.ExportsRestored(); n != 1 {
		t.Errorf("ExportsRestored = %d, want 1", n)
	}
}
