package nvmeof_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof/nvmeoftest"
)

func target(volumeID string) nvmeof.Target {
	id, _ := export.For(volumeID)
	return nvmeof.Target{Transport: "tcp", Address: netip.MustParseAddr("192.0.2.10"), Port: 4420, NQN: id.SubsystemNQN}
}

func TestOptionString(t *testing.T) {
	v := func(n int32) *int32 { return &n }
	got := nvmeof.OptionString(target("pvc-1"), nvmeof.Host{NQN: "nqn.2014-08.org.nvmexpress:uuid:x", ID: "h"},
		export.ConnectOptions{CtrlLossTimeoutSeconds: v(-1), ReconnectDelaySeconds: v(2), KeepAliveTimeoutSeconds: v(5), NrIOQueues: v(4), QueueSize: v(64)})
	want := "transport=tcp,traddr=192.0.2.10,trsvcid=4420,nqn=nqn.2026-01.io.pillar-csi:volume:pvc-1," +
		"hostnqn=nqn.2014-08.org.nvmexpress:uuid:x,hostid=h,ctrl_loss_tmo=-1,reconnect_delay=2,keep_alive_tmo=5,nr_io_queues=4,queue_size=64"
	if got != want {
		t.Errorf("OptionString =\n %s\nwant\n %s", got, want)
	}
	if got := nvmeof.OptionString(target("pvc-1"), nvmeof.Host{}, export.ConnectOptions{}); strings.Contains(got, "host") || strings.Contains(got, "tmo") {
		t.Errorf("defaults should leave options out: %s", got)
	}
}

func TestConnectReusesAndDisconnectIsPerSubsystem(t *testing.T) {
	f := nvmeoftest.New(t)
	f.Export("pvc-1", "192.0.2.10", 4420, 1<<30)
	f.Export("pvc-2", "192.0.2.10", 4420, 1<<30)
	in := f.Initiator()
	ctx := context.Background()
	c1, reused, err := in.Connect(ctx, target("pvc-1"), nvmeof.Host{}, export.ConnectOptions{})
	if err != nil || reused {
		t.Fatalf("Connect = %s %v %v", c1, reused, err)
	}
	again, reused, err := in.Connect(ctx, target("pvc-1"), nvmeof.Host{}, export.ConnectOptions{})
	if err != nil || !reused || again != c1 || len(f.Connects()) != 1 {
		t.Fatalf("second Connect = %s %v %v (%d connects)", again, reused, err, len(f.Connects()))
	}
	if _, _, err := in.Connect(ctx, target("pvc-2"), nvmeof.Host{}, export.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	id1, _ := export.For("pvc-1")
	dev, err := in.WaitNamespace(ctx, id1)
	if err != nil || filepath.Join(f.Paths().Dev, dev) != f.Device("pvc-1") {
		t.Fatalf("WaitNamespace = %s, %v; want %s", dev, err, f.Device("pvc-1"))
	}
	if err := in.Disconnect(ctx, id1.SubsystemNQN); err != nil {
		t.Fatal(err)
	}
	if len(f.Controllers("pvc-1")) != 0 || len(f.Controllers("pvc-2")) != 1 {
		t.Fatalf("after disconnect: pvc-1 %v, pvc-2 %v", f.Controllers("pvc-1"), f.Controllers("pvc-2"))
	}
	if err := in.Disconnect(ctx, id1.SubsystemNQN); err != nil {
		t.Fatalf("second Disconnect: %v", err)
	}
}

func TestConnectErrorsAndRace(t *testing.T) {
	f := nvmeoftest.New(t)
	in := f.Initiator()
	host := nvmeof.Host{NQN: "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001", ID: "aaaaaaaa-0000-4000-8000-000000000001"}
	_, _, err := in.Connect(context.Background(), target("pvc-1"), host, export.ConnectOptions{})
	var e *nvmeof.Error
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &e) || !strings.Contains(err.Error(), "nqn=") {
		t.Fatalf("Connect to nothing = %v", err)
	}
	// The error reaches the pod's events: it names the target, not this
	// host's NQN or ID.
	if strings.Contains(err.Error(), host.NQN) || strings.Contains(err.Error(), host.ID) {
		t.Errorf("Connect to nothing = %v: it names the host", err)
	}
	// EALREADY: another connect won; its controller is used.
	f.Export("pvc-1", "192.0.2.10", 4420, 1<<30)
	if _, _, err := in.Connect(context.Background(), target("pvc-1"), nvmeof.Host{}, export.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another connect of the same host wins between Connect's look and
	// its write: the kernel answers EALREADY, and the winner's controller
	// is used.
	f.Export("pvc-2", "192.0.2.10", 4420, 1<<30)
	winner := f.Initiator()
	raced := nvmeof.NewFake(f.Paths(), nvmeof.Kernel{
		Connect: func(ctx context.Context, opts string) (string, error) {
			if _, _, err := winner.Connect(ctx, target("pvc-2"), nvmeof.Host{}, export.ConnectOptions{}); err != nil {
				return "", err
			}
			return "", syscall.EALREADY
		},
	})
	name, reused, err := raced.Connect(context.Background(), target("pvc-2"), nvmeof.Host{}, export.ConnectOptions{})
	if err != nil || !reused || len(f.Controllers("pvc-2")) != 1 || name != f.Controllers("pvc-2")[0] {
		t.Fatalf("Connect after EALREADY = %q %v %v (controllers %v)", name, reused, err, f.Controllers("pvc-2"))
	}
}

func TestWaitNamespaceIsBounded(t *testing.T) {
	f := nvmeoftest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	id, _ := export.For("pvc-absent")
	_, err := f.Initiator().WaitNamespace(ctx, id)
	if !errors.Is(err, nvmeof.ErrNamespaceNotFound) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitNamespace = %v", err)
	}
}

func TestFindNamespaceRefusesAmbiguity(t *testing.T) {
	f := nvmeoftest.New(t)
	id, _ := export.For("pvc-decoy") // nvmeoftest's decoy nvme0n1
	name, ok, err := f.Initiator().FindNamespace(id)
	if err != nil || !ok || name != "nvme0n1" {
		t.Fatalf("FindNamespace = %s %v %v", name, ok, err)
	}
	dir := filepath.Join(f.Paths().Sys, "block", "nvme3n1")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "nguid"), []byte(id.NGUID+"\n"), 0o644)
	// Per-path nodes of native multipath carry the same identifiers and
	// are not devices.
	pathDir := filepath.Join(f.Paths().Sys, "block", "nvme0c0n1")
	os.MkdirAll(pathDir, 0o755)
	os.WriteFile(filepath.Join(pathDir, "uuid"), []byte(id.UUID+"\n"), 0o644)
	if _, _, err := f.Initiator().FindNamespace(id); err == nil || !strings.Contains(err.Error(), "several block devices [nvme0n1 nvme3n1]") {
		t.Fatalf("two devices with one identity: %v", err)
	}
}
