//go:build kernel

package agent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTwoHostsOneExport is the kernel side of a ReadWriteMany block volume
// (docs/rwx-block.md): two host identities are allowed on one export, each
// under the token of its own publication as pillar-controller issues them
// (generations 2 and 3), and both are connected at once.
//
// In one kernel the initiator's native multipath joins the two controllers
// of one subsystem under one namespace head, so each host's commands are
// sent down its own controller (fixture.Path): the target sees each on
// that host's association, as it would from two machines. Each host
// writes its own range and reads the other's; a write of one host lands
// between two of the other's and is read at once. Then the second host is
// denied (ControllerUnpublishVolume of its node, generation 4) while a
// writer goes on through the namespace head with O_DIRECT: the writer
// never sees an error, the denied host's next write fails and changes
// nothing, it cannot connect again, and a stale token cannot let it back.
func TestTwoHostsOneExport(t *testing.T) {
	guest.RequireGuest(t)
	zv := newZFS(t)
	requireEmptyNvmet(t)
	a := startAgent(t, t.TempDir())
	port := fixture.FreeTCPPort(t)
	const id = "pvc-rwx"
	uid := fixture.RandomUUID(t)
	mustCreateExport(t, a.c, zv, id, tok(uid, 1), port, true)
	for i, h := range []string{hostA, hostB} {
		if _, err := a.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tok(uid, uint64(2+i)), VolumeId: id, HostNqn: h}); err != nil {
			t.Fatalf("AllowHost %s: %v", h, err)
		}
	}
	ident, _ := export.For(id)
	connect := func(host string) (*fixture.Controller, error) {
		// A short reconnect delay, as pillar-node sets it, and a loss
		// timeout that lets the denied host's controller go within the
		// test.
		return fixture.Connect(t, fixture.Connection{Port: port, NQN: ident.SubsystemNQN, HostNQN: host,
			HostID: fixture.RandomUUID(t), Options: []string{"reconnect_delay=1", "ctrl_loss_tmo=15"}})
	}
	ca, err := connect(hostA)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := connect(hostB)
	if err != nil {
		t.Fatal(err)
	}
	head := fixture.NamespaceByUUID(t, ident.UUID)
	pa, pb := fixture.PathOf(t, ca), fixture.PathOf(t, cb)
	t.Logf("host A on %s, host B on %s, one namespace head %s, block size %d", pa.Controller, pb.Controller, head, pa.BlockSize)

	// Disjoint ranges, each written by one host and read by the other.
	const rng = 1 << 20
	dataA, dataB := fixture.RandomBytes(t, rng), fixture.RandomBytes(t, rng)
	mustIO(t, "A writes its range", pa.WriteAt(dataA, 0))
	mustIO(t, "B writes its range", pb.WriteAt(dataB, rng))
	checkRange(t, "A reads B's range", pa, rng, dataB)
	checkRange(t, "B reads A's range", pb, 0, dataA)
	// Interleaved: each write is seen by the other host at once, so
	// neither side holds a stale copy.
	const blk = 64 << 10
	for i := range 8 {
		w, r, who := pa, pb, "A"
		if i%2 == 1 {
			w, r, who = pb, pa, "B"
		}
		b := fixture.RandomBytes(t, blk)
		off := int64(2*rng + i*blk)
		mustIO(t, fmt.Sprintf("round %d: %s writes", i, who), w.WriteAt(b, off))
		checkRange(t, fmt.Sprintf("round %d: the other host reads %s's write", i, who), r, off, b)
	}

	// A writer on the namespace head (the device a pod on host A's node
	// opens) goes on while host B is denied.
	wr := startDirectWriter(t, head, 4*rng, blk)
	wr.waitWrites(t, 10)
	denied := time.Now()
	if _, err := a.c.DenyHost(ctxT(t), &agentv1.DenyHostRequest{FencingToken: tok(uid, 4), VolumeId: id, HostNqn: hostB}); err != nil {
		t.Fatalf("DenyHost B: %v", err)
	}
	t.Logf("DenyHost returned after %v", time.Since(denied).Round(time.Millisecond))
	attempt := fixture.RandomBytes(t, rng)
	if err := pb.WriteAt(attempt, rng); err == nil {
		t.Errorf("host B wrote after DenyHost returned")
	} else {
		t.Logf("host B's write after the deny: %v", err)
	}
	atDeny := wr.count()
	wr.waitWrites(t, atDeny+20)
	pause, total := wr.stop(t)
	t.Logf("host A's writer: %d writes, longest pause %v (the deny drops every association; host A reconnects after its reconnect_delay)", total, pause.Round(time.Millisecond))

	fixture.WaitFor(t, "host B's controller to be refused and given up", 2*time.Minute, func() bool {
		st, err := os.ReadFile(filepath.Join("/sys/class/nvme", cb.Name, "state"))
		return err != nil || !bytes.HasPrefix(st, []byte("live"))
	})
	if c, err := connect(hostB); err == nil {
		t.Errorf("host B connected again after the deny (%s)", c.Name)
	}
	// A controller that lost the race for the record (generation 3 was
	// host B's publication) cannot let host B back.
	_, err = a.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tok(uid, 3), VolumeId: id, HostNqn: hostB})
	if rej, ok := agentv1.FencingRejectionOf(err); status.Code(err) != codes.FailedPrecondition || !ok || rej.GetReason() != agentv1.FencingRejection_REASON_STALE_GENERATION {
		t.Errorf("AllowHost B with the stale generation 3: %v, want FAILED_PRECONDITION (stale generation)", err)
	}
	if c, err := connect(hostB); err == nil {
		t.Errorf("host B connected after a stale AllowHost (%s)", c.Name)
	}
	checkRange(t, "B's range after its refused write", pa, rng, dataB)
	last := wr.last()
	checkRange(t, "host A's last write through the head", pa, last.off, last.data)
}

func mustIO(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// checkRange reads len(want) bytes at off through p and compares.
func checkRange(t *testing.T, what string, p *fixture.Path, off int64, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	mustIO(t, what, p.ReadAt(got, off))
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes at %d differ from what was written", what, len(want), off)
	}
}
