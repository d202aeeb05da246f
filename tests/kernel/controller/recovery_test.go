//go:build kernel

package controller

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// healTimeout bounds how long a storage-node reboot or an agent crash may
// take to heal, in the guest.
const healTimeout = 3 * time.Minute

// TestCSIStorageNodeReboot publishes and stages a ZFS volume on worker A,
// writes data, and then does to the storage node what a reboot does: the
// agent dies (SIGKILL) and configfs loses the volume's export (port link,
// allowed host, namespace, subsystem, the now empty port). The agent is
// started again on the same fencing directory; nobody else acts. The
// controller sees the new agent instance and pushes the desired exports;
// the export comes back with A's host NQN allowed, the kernel initiator on
// A reconnects by itself (its controller goes back to "live"), and the
// data read through the still mounted filesystem, with the page cache
// dropped, is what was written.
func TestCSIStorageNodeReboot(t *testing.T) {
	l := setup(t)
	s := newStack(t, l, "storage-reboot", backendZFS)
	st := s.stores[backendZFS]
	a := s.startWorker("worker-r")
	sw := newStopwatch(t)

	id := "pvc-reboot-" + fixture.RandomHex(t, 4)
	v := s.createVolume(st, id, volumeSize)
	v.publish(a)
	v.stage(a)
	data := fixture.RandomBytes(t, int(dataSize))
	sum := sha256.Sum256(data)
	file := filepath.Join(a.target(id), "data.bin")
	fixture.WriteFile(t, file, data)
	sw.step("CreateVolume, publish and stage on A, write %d MiB", dataSize/mib)
	ctrls := fixture.Controllers(t, v.nqn)
	if len(ctrls) != 1 {
		t.Fatalf("initiator controllers of %s: %v, want one", v.nqn, ctrls)
	}
	t.Logf("before the reboot: %s; initiator %v", describeSubsystem(v.nqn), controllerStates(t, v.nqn))
	identity := exportIdentity(v.nqn)

	s.agent.kill()
	fixture.WipeExport(t, v.nqn)
	sw.step("SIGKILL pillar-agent, wipe the export from configfs")
	left := time.Now()
	eventually(t, "A's controller to notice the target is gone", time.Minute, func() (bool, string) {
		m := controllerStates(t, v.nqn)
		return m[ctrls[0]] != "live", fmt.Sprint(m)
	})
	t.Logf("A's controller left live %v after the wipe: %v", time.Since(left).Round(time.Millisecond), controllerStates(t, v.nqn))
	sw.step("initiator on A notices (controller not live)")

	restarted := time.Now()
	watch := watchRecovery(v.nqn, a.hostNQN, s.port, ctrls[0], restarted)
	s.agent.start()
	sw.step("restart pillar-agent (same fencing directory), until it answers")
	r := <-watch
	t.Logf("controller states seen on A during recovery: %s", strings.Join(r.states, " → "))
	if r.err != "" {
		t.Fatalf("recovery: %s", r.err)
	}
	t.Logf("TIMING: agent restart → export restored in configfs: %v; → A's controller live: %v (guest time)",
		r.exported.Round(time.Millisecond), r.live.Round(time.Millisecond))
	t.Logf("after the push: %s", describeSubsystem(v.nqn))
	// The initiator keeps the namespace only if the re-created export
	// is the same one.
	if got := exportIdentity(v.nqn); got != identity {
		t.Errorf("the restored export's identity is %s, before the reboot it was %s", got, identity)
	}
	sw.step("export restored and A's controller live")

	ev := l.waitEventSince(t, s.name, "ExportsPushed", restarted)
	t.Logf("ExportsPushed event: %s (series %v)", ev.Note, ev.Series)
	sw.step("ExportsPushed event on the PillarAgent")

	dropCaches(t)
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read through the mounted filesystem after the reboot: %v", err)
	}
	if gs := sha256.Sum256(got); !bytes.Equal(gs[:], sum[:]) {
		t.Errorf("data read after the reboot: sha256 %x, written %x", gs, sum)
	}
	sw.step("drop caches, read %d MiB on A, checksum equal", dataSize/mib)
	// And the volume still works for writing.
	fixture.WriteFile(t, filepath.Join(a.target(id), "after.bin"), fixture.RandomBytes(t, 1<<20))

	v.unstage(a)
	v.unpublish(a)
	v.delete()
	sw.step("unstage, ControllerUnpublish, DeleteVolume")
	sw.summary("storage-node reboot")
}

// TestCSIAgentKilledMidCreate SIGKILLs the agent while the controller's
// CreateVolume is in flight, restarts it, and retries CreateVolume with the
// same name until it succeeds, as the external-provisioner does: there must
// be exactly one zvol of that name, the PillarVolumeState must record it
// created and exported, the export must be whole, and DeleteVolume must
// leave nothing behind. The kill lands at two points: as soon as the zvol
// shows in `zfs list` (the backend volume exists, nothing is recorded),
// and as soon as the volume's subsystem appears in configfs (an export
// half made).
func TestCSIAgentKilledMidCreate(t *testing.T) {
	l := setup(t)
	s := newStack(t, l, "storage-kill", backendZFS)
	st := s.stores[backendZFS]
	for _, kp := range []struct {
		name string
		what string
		// seen reports whether the kill point is reached.
		seen     func(t *testing.T, id, nqn string) bool
		interval time.Duration
	}{
		{"zvol", "the zvol shows in zfs list", func(t *testing.T, id, _ string) bool { return slices.Contains(st.backendVolumes(t), id) }, 20 * time.Millisecond},
		{"subsystem", "the subsystem appears in configfs", func(_ *testing.T, _, nqn string) bool {
			_, err := os.Stat(filepath.Join(fixture.NVMetRoot, "subsystems", nqn))
			return err == nil
		}, 2 * time.Millisecond},
	} {
		t.Run(kp.name, func(t *testing.T) {
			parent := s.t
			s.t, s.agent.t = t, t
			defer func() { s.t, s.agent.t = parent, parent }()
			killedMidCreate(t, s, st, kp.what, func(id, nqn string) bool { return kp.seen(t, id, nqn) }, kp.interval)
		})
	}
}

// killAttempts bounds the tries to land the kill inside CreateVolume: on a
// loaded guest the poller can miss the window (tens of milliseconds for an
// export), and a CreateVolume that finishes first proves nothing, so the
// test deletes that volume and tries again with another name.
const killAttempts = 5

func killedMidCreate(t *testing.T, s *stack, st *store, what string, seen func(id, nqn string) bool, interval time.Duration) {
	sw := newStopwatch(t)
	var v *volume
	var req *csi.CreateVolumeRequest
	for attempt := 1; ; attempt++ {
		v = s.track(st, "pvc-kill-"+fixture.RandomHex(t, 4))
		req = s.createRequest(st, v.id, volumeSize)
		if killDuringCreate(t, s, v, req, what, seen, interval) {
			break
		}
		if attempt == killAttempts {
			t.Fatalf("CreateVolume finished before %s in all %d attempts: the kill never landed", what, killAttempts)
		}
	}
	t.Logf("left behind: backend volumes %v; subsystem %s", st.backendVolumes(t), describeSubsystem(v.nqn))
	sw.step("CreateVolume with the agent SIGKILLed in flight")
	if pvs, err := v.state(t); err == nil {
		t.Logf("PillarVolumeState after the kill: backendCreated %v, exported %v, generation %d",
			pvs.Status.BackendCreated, pvs.Status.Exported, pvs.Spec.PublicationGeneration)
	}

	restarted := time.Now()
	s.agent.start()
	sw.step("restart pillar-agent")
	var resp *csi.CreateVolumeResponse
	for attempt := 1; ; attempt++ {
		var err error
		resp, err = s.ctrl.CreateVolume(csiCtx(t), req)
		if err == nil {
			t.Logf("CreateVolume succeeded at attempt %d, %v after the agent restart", attempt, time.Since(restarted).Round(time.Millisecond))
			break
		}
		t.Logf("CreateVolume retry %d: %v", attempt, err)
		if time.Since(restarted) > healTimeout {
			t.Fatalf("CreateVolume still fails %v after the agent restart: %v", healTimeout, err)
		}
		time.Sleep(time.Second)
	}
	v.accept(resp)
	sw.step("retried CreateVolume until it succeeded")

	if ids := st.backendVolumes(t); len(ids) != 1 || ids[0] != v.id {
		t.Errorf("after the retried CreateVolume the ZFS store has volumes %v, want exactly [%s]", ids, v.id)
	}
	pvs, err := v.state(t)
	if err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(pvs.Status.Conditions, v1alpha1.ConditionReady)
	if !pvs.Status.BackendCreated || !pvs.Status.Exported || c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("PillarVolumeState status: backendCreated %v, exported %v, Ready %v; want true, true, True", pvs.Status.BackendCreated, pvs.Status.Exported, c)
	}
	if !exportWhole(v.nqn, s.port) {
		t.Errorf("the export of the retried volume is not whole: %s", describeSubsystem(v.nqn))
	}
	t.Logf("PillarVolumeState: backendCreated %v, exported %v, capacity %d, generation %d; %s", pvs.Status.BackendCreated, pvs.Status.Exported,
		pvs.Status.CapacityBytes, pvs.Spec.PublicationGeneration, describeSubsystem(v.nqn))

	v.delete()
	if ids := st.backendVolumes(t); len(ids) != 0 {
		t.Errorf("after DeleteVolume the ZFS store still has volumes %v", ids)
	}
	sw.step("DeleteVolume, nothing left")
	sw.summary("agent killed mid-CreateVolume when " + what)
}

// killDuringCreate starts CreateVolume for v, polls seen every interval,
// and SIGKILLs the agent as soon as it holds (or after a minute). It
// returns false, with the agent alive and the volume deleted, when
// CreateVolume succeeded before seen held: the caller tries again.
func killDuringCreate(t *testing.T, s *stack, v *volume, req *csi.CreateVolumeRequest, what string, seen func(id, nqn string) bool, interval time.Duration) bool {
	type result struct {
		resp *csi.CreateVolumeResponse
		err  error
		took time.Duration
	}
	first := make(chan result, 1)
	began := time.Now()
	go func() {
		resp, err := s.ctrl.CreateVolume(csiCtx(t), req)
		first <- result{resp, err, time.Since(began)}
	}()
	var reached time.Duration
	var early *result
	for reached == 0 && early == nil && time.Since(began) < time.Minute {
		if seen(v.id, v.nqn) {
			reached = time.Since(began)
			break
		}
		select {
		case r := <-first:
			early = &r
		case <-time.After(interval):
		}
	}
	if early != nil && early.err == nil {
		t.Logf("CreateVolume %s succeeded after %v, before %s was seen: deleting it and trying again", v.id, early.took.Round(time.Millisecond), what)
		v.accept(early.resp)
		v.delete()
		return false
	}
	s.agent.kill()
	killed := time.Since(began)
	switch {
	case early != nil:
		t.Errorf("CreateVolume failed (%v) after %v, before %s and before the agent was killed", early.err, early.took, what)
	case reached == 0:
		t.Logf("%s did not happen in a minute; the agent was killed anyway", what)
	default:
		t.Logf("%s %v after CreateVolume began; agent SIGKILLed at %v", what, reached.Round(time.Millisecond), killed.Round(time.Millisecond))
	}
	if early == nil {
		r := <-first
		early = &r
	}
	t.Logf("the interrupted CreateVolume returned after %v: %v (%v)", early.took.Round(time.Millisecond), codeOf(early.err), early.err)
	return true
}

// recovery is what watchRecovery saw, measured from the agent's restart.
type recovery struct {
	exported time.Duration // the export back in configfs, A allowed
	live     time.Duration // A's controller live again
	states   []string      // the controller's states as they changed
	err      string
}

// watchRecovery polls configfs and the initiator's controller ctrl from
// its own goroutine (the agent's start blocks the test's) until the
// export is back and the controller is live, or healTimeout passes.
func watchRecovery(nqn, hostNQN string, port int, ctrl string, since time.Time) <-chan recovery {
	out := make(chan recovery, 1)
	go func() {
		var r recovery
		last := ""
		for {
			now := time.Since(since)
			state := readAttr(filepath.Join("/sys/class/nvme", ctrl, "state"))
			if state != last {
				r.states = append(r.states, fmt.Sprintf("%s@%v", state, now.Round(time.Millisecond)))
				last = state
			}
			if r.exported == 0 && exportRestored(nqn, hostNQN, port) {
				r.exported = now
			}
			if r.live == 0 && state == "live" {
				r.live = now
			}
			if r.exported != 0 && r.live != 0 {
				break
			}
			if now > healTimeout {
				r.err = fmt.Sprintf("after %v: export restored %v (%s), controller %s %s", healTimeout, r.exported != 0, describeSubsystem(nqn), ctrl, state)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		out <- r
	}()
	return out
}

// exportRestored reports whether the subsystem nqn is back, whole, with
// hostNQN allowed.
func exportRestored(nqn, hostNQN string, port int) bool {
	return allowed(nqn, hostNQN) && exportWhole(nqn, port)
}

// exportWhole reports whether the subsystem nqn has its namespace, with
// the volume's derived UUID, enabled and is linked to the nvmet port on
// 127.0.0.1:port.
func exportWhole(nqn string, port int) bool {
	ns := filepath.Join(fixture.NVMetRoot, "subsystems", nqn, "namespaces", "1")
	id, ok := export.VolumeIDFromNQN(nqn)
	if !ok {
		return false
	}
	ident, _ := export.For(id)
	if readAttr(filepath.Join(ns, "enable")) != "1" || readAttr(filepath.Join(ns, "device_uuid")) != ident.UUID ||
		readAttr(filepath.Join(ns, "device_nguid")) != ident.NGUID {
		return false
	}
	links, _ := filepath.Glob(filepath.Join(fixture.NVMetRoot, "ports", "*", "subsystems", nqn))
	for _, l := range links {
		p := filepath.Dir(filepath.Dir(l))
		if readAttr(filepath.Join(p, "addr_trsvcid")) == strconv.Itoa(port) && readAttr(filepath.Join(p, "addr_traddr")) == "127.0.0.1" {
			return true
		}
	}
	return false
}

// exportIdentity is what the initiator identifies an export by: the
// subsystem's serial and model, the namespace's UUID and NGUID.
func exportIdentity(nqn string) string {
	sub := filepath.Join(fixture.NVMetRoot, "subsystems", nqn)
	ns := filepath.Join(sub, "namespaces", "1")
	return fmt.Sprintf("serial=%s model=%s uuid=%s nguid=%s", readAttr(filepath.Join(sub, "attr_serial")), readAttr(filepath.Join(sub, "attr_model")),
		readAttr(filepath.Join(ns, "device_uuid")), readAttr(filepath.Join(ns, "device_nguid")))
}

// waitEventSince waits for an events.k8s.io Event about the PillarAgent
// name with the reason, observed at or after since: a new Event, or a
// repeat counted in an earlier one's series.
func (l *lab) waitEventSince(t testing.TB, name, reason string, since time.Time) eventsv1.Event {
	t.Helper()
	var ev eventsv1.Event
	eventually(t, fmt.Sprintf("a %s event about PillarAgent %s after %s", reason, name, since.Format(time.RFC3339Nano)), statusTimeout, func() (bool, string) {
		var evs eventsv1.EventList
		if err := l.admin.List(csiCtx(t), &evs); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind != "PillarAgent" || e.Regarding.Name != name || e.Reason != reason {
				continue
			}
			at := e.EventTime.Time
			if e.Series != nil && e.Series.LastObservedTime.After(at) {
				at = e.Series.LastObservedTime.Time
			}
			if !at.Before(since) {
				ev = e
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%q at %s", e.Note, at.Format(time.RFC3339Nano)))
		}
		return false, fmt.Sprintf("only earlier ones: %v", seen)
	})
	return ev
}
