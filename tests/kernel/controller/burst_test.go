//go:build kernel

package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// TestConcurrentCreates is the smallest setting of BenchmarkConcurrentCreate
// as a test, on the two backends whose creates are admitted against shared
// space (sparse ZFS, LVM thin): ten CreateVolume calls at once all succeed
// at their first attempt, leave ten volumes, and ten DeleteVolume calls at
// once leave none. It measures nothing; the benchmark does.
func TestConcurrentCreates(t *testing.T) {
	const n = 10
	l := setup(t)
	for _, kind := range []string{backendZFSSparse, backendLVMThin} {
		t.Run(kind, func(t *testing.T) {
			s := newStack(t, l, "storage-burst-"+kind, kind)
			st := s.stores[kind]
			ids := make([]string, n)
			tag := fixture.RandomHex(t, 3)
			for i := range ids {
				ids[i] = fmt.Sprintf("pvc-burst-%s-%02d", tag, i)
				s.track(st, ids[i]).deleted = true // deleteAtOnce does it; dump on failure
			}
			began := time.Now()
			if failed := s.createAtOnce(t, st, ids); failed != 0 {
				t.Errorf("%d CreateVolume calls failed (and were retried) among %d made at once", failed, n)
			}
			took := time.Since(began)
			if got := st.backendVolumes(t); len(got) != n {
				t.Errorf("after %d CreateVolume calls at once the store has %d volumes: %v", n, len(got), got)
			}
			t.Logf("%d CreateVolume at once on %s: %v; deleting them at once: %v (guest time)", n, kind, took.Round(time.Millisecond),
				s.deleteAtOnce(t, st, ids).Round(time.Millisecond))
		})
	}
}

// createRetried calls CreateVolume for id until it succeeds, as the
// external-provisioner does, up to 30 times, and returns how many calls
// failed.
func (s *stack) createRetried(t testing.TB, st *store, id string) (failed int) {
	for attempt := 1; ; attempt++ {
		_, err := s.ctrl.CreateVolume(csiCtx(t), s.createRequest(st, id, benchVolumeSize))
		if err == nil {
			return failed
		}
		failed++
		if attempt == 30 {
			t.Errorf("CreateVolume %s: %v (attempt %d)", id, err, attempt)
			return failed
		}
		t.Logf("CreateVolume %s: %v; retrying", id, err)
		time.Sleep(time.Second)
	}
}

// createAtOnce calls CreateVolume for every id at once, each retried as
// createRetried does, and returns how many calls failed.
func (s *stack) createAtOnce(t testing.TB, st *store, ids []string) (failed int) {
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { n.Add(int64(s.createRetried(t, st, id))) })
	}
	wg.Wait()
	return int(n.Load())
}

// deleteAtOnce deletes every volume of ids at once, each call retried up
// to 10 times, checks that the store is empty after, and returns how long
// it took.
func (s *stack) deleteAtOnce(t testing.TB, st *store, ids []string) time.Duration {
	began := time.Now()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for attempt := 1; ; attempt++ {
				_, err := s.ctrl.DeleteVolume(csiCtx(t), &csi.DeleteVolumeRequest{VolumeId: id})
				if err == nil {
					return
				}
				if attempt == 10 {
					t.Errorf("DeleteVolume %s: %v (attempt %d)", id, err, attempt)
					return
				}
				time.Sleep(time.Second)
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	if left := st.backendVolumes(t); len(left) != 0 {
		t.Errorf("after deleting the volumes the store still has %v", left)
	}
	return took
}

// rawCreatesAtOnce is the floor of a burst on st: n volumes made at once
// with the backend's own create command (as the backend runs it), each
// exported through configfs as the agent exports it, without anything of
// pillar-csi in between. It returns the time until the last export was
// made, and removes everything after.
func rawCreatesAtOnce(t testing.TB, st *store, n int) time.Duration {
	ctx := context.Background()
	fs := configfs.NewFS("")
	addr := configfs.Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "127.0.0.1", TrSvcID: strconv.Itoa(fixture.FreeTCPPort(t))}
	tag := fixture.RandomHex(t, 3)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("raw-%s-%03d", tag, i)
	}
	if st.pool != nil {
		// The store's parent dataset, which the backend makes with its
		// first volume: the floor's creates need it too.
		argv := []string{"zfs", "create", "-p", "-o", "canmount=off", st.pool.Name + "/" + zfsParent}
		if _, err := (command.Exec{}).Run(ctx, argv[0], argv[1:]...); err != nil {
			t.Fatalf("%s: %v", strings.Join(argv, " "), err)
		}
	}
	errs := make([]error, n)
	var zvols fixture.ZvolFinder
	began := time.Now()
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = st.rawCreateExport(ctx, fs, &zvols, id, addr) })
	}
	wg.Wait()
	took := time.Since(began)
	if err := errors.Join(errs...); err != nil {
		t.Errorf("raw creates and exports: %v", err)
	}
	for i, id := range ids {
		// What a failed create made, if anything, goes too; only the
		// removal of what was made is checked.
		made := errs[i] == nil
		ident, _ := export.For(id)
		if err := fs.Remove(ctx, ident.SubsystemNQN); err != nil && !configfs.IsNotExist(err) && made {
			t.Errorf("removing the raw export of %s: %v", id, err)
		}
		argv := st.rawRemove(st.rawVolumeName(id))
		if _, err := (command.Exec{}).Run(ctx, argv[0], argv[1:]...); err != nil && made {
			t.Errorf("removing raw volume %s: %v", id, err)
		}
	}
	return took
}

// rawCreateExport makes volume id with the backend's create command, waits
// for its device (a zvol's as udev would find it: zvols, shared by the
// burst, asks each new device once), and exports it at addr.
func (st *store) rawCreateExport(ctx context.Context, fs *configfs.FS, zvols *fixture.ZvolFinder, id string, addr configfs.Address) error {
	argv := st.rawVolume(id, benchVolumeSize)
	if _, err := (command.Exec{}).Run(ctx, argv[0], argv[1:]...); err != nil {
		return err
	}
	var dev string
	if st.vg != nil {
		dev = st.vg.DevicePath(lvm.LVName(st.vg.Name, id))
		if _, err := os.Stat(dev); err != nil {
			return err
		}
	} else {
		var err error
		if dev, err = zvols.Device(ctx, st.rawVolumeName(id), 30*time.Second); err != nil {
			return err
		}
	}
	ident, err := export.For(id)
	if err != nil {
		return err
	}
	e := configfs.Export{NQN: ident.SubsystemNQN, Attrs: configfs.SubsystemAttrs{AllowAnyHost: true},
		Namespaces: []configfs.Namespace{{NSID: 1, DevicePath: dev, DeviceUUID: ident.UUID, DeviceNGUID: ident.NGUID, Enabled: true}},
		Ports:      []configfs.Address{addr}}
	// A zvol's node can show before the kernel lets nvmet open it: Apply
	// tries the namespace's enable again while it fails with ENOENT.
	return fs.Apply(ctx, e)
}
