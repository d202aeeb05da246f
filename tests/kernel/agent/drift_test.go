//go:build kernel

package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
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

	const block = 64 << 10
	pattern := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, block) }
	var (
		mu      sync.Mutex
		written int
		werr    error
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f, err := os.OpenFile(dev, os.O_WRONLY, 0)
		if err != nil {
			mu.Lock()
			werr = err
			mu.Unlock()
			return
		}
		defer f.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := f.WriteAt(pattern(i), int64(i%256)*block)
			if err == nil {
				err = f.Sync()
			}
			mu.Lock()
			if err != nil {
				werr = fmt.Errorf("write %d: %w", i, err)
				mu.Unlock()
				return
			}
			written = i + 1
			mu.Unlock()
		}
	}()
	progress := func() int { mu.Lock(); defer mu.Unlock(); return written }
	fixture.WaitFor(t, "the host writing", 30*time.Second, func() bool { return progress() >= 10 })

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
	atRestore := progress()
	fixture.WaitFor(t, "the host writing again", 2*time.Minute, func() bool { return progress() >= atRestore+10 })
	t.Logf("the host resumed writing %v after the wipe", time.Since(wiped).Round(time.Millisecond))
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if werr != nil {
		t.Fatalf("the host saw an error: %v", werr)
	}
	last := written - 1
	if got := fixture.ReadAt(t, dev, int64(last%256)*block, block); !bytes.Equal(got, pattern(last)) {
		t.Errorf("block %d does not read back what was written", last)
	}
	if n := a.srv.ExportsRestored(); n != 1 {
		t.Errorf("ExportsRestored = %d, want 1", n)
	}
}
