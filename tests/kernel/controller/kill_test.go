//go:build kernel

package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	csicontroller "github.com/pillar-csi/pillar-csi/csidriver/controller"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// killPoint is a moment at which pillar-controller is SIGKILLed: one the
// volume's record shows, or one the storage node shows.
type killPoint struct {
	name string
	what string
	// reached reports whether the record shows the moment.
	reached func(*v1alpha1.PillarVolumeState) bool
	// onNode, when set instead, is polled (every 10 ms) for a moment that
	// no record write marks; a call may end before a poll sees it.
	onNode func(t *testing.T, id string) bool
}

// killAttemptsOnNode bounds the tries to land a kill at a moment polled on
// the storage node: a call that ends first proves nothing, and the test
// tries again with another volume.
const killAttemptsOnNode = 5

// TestCSIControllerKilledMidCall SIGKILLs the pillar-controller process
// while a CSI call is in flight, at moments read from the volume's
// PillarVolumeState through a watch on the API server (the record is the
// controller's only durable memory, so these are the moments that
// matter): during CreateVolume as soon as the record exists (nothing done
// at the agent yet, or the backend create under way), and as soon as the
// zvol shows in the store (the backend create done, the export next or
// under way: CreateVolume writes the record's status only when both are
// done, so no record write marks this moment); during DeleteVolume as soon as
// the record is marked deleted (the agent's one DeleteVolume call, which
// removes the export and then the zvol, next). A fresh
// controller process is started each time and the call is retried, as the
// CSI sidecars do: the retried CreateVolume must leave exactly one zvol,
// a whole export and a complete record; the retried DeleteVolume no zvol,
// no subsystem and no record.
func TestCSIControllerKilledMidCall(t *testing.T) {
	l := setup(t)
	s := newStack(t, l, "storage-ckill", backendZFS)
	st := s.stores[backendZFS]
	holder, err := l.leaseHolder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever failed, the later tests get a controller.
		if l.controller.exited() {
			if err := l.launchController(); err != nil {
				t.Errorf("starting pillar-controller again: %v", err)
			}
		}
	})
	defer func() {
		if t.Failed() {
			for i, p := range l.controllers {
				t.Logf("---- pillar-controller process %d of %d (%v) ----\n%s", i+1, len(l.controllers), p.err, tail(p.log.String(), 200))
			}
		}
	}()

	for _, kp := range []killPoint{
		{name: "recorded", what: "the PillarVolumeState exists", reached: func(*v1alpha1.PillarVolumeState) bool { return true }},
		{name: "zvolCreated", what: "the zvol shows in the store", onNode: func(t *testing.T, id string) bool { return slices.Contains(st.backendVolumes(t), id) }},
	} {
		t.Run("CreateVolume/"+kp.name, func(t *testing.T) {
			parent := s.t
			s.t = t
			defer func() { s.t = parent }()
			var v *volume
			var req *csi.CreateVolumeRequest
			for attempt := 1; ; attempt++ {
				id := "pvc-ckill-" + fixture.RandomHex(t, 4)
				v = s.track(st, id)
				req = s.createRequest(st, id, volumeSize)
				landed := s.killDuring(t, id, kp, func(ctx context.Context) error {
					_, err := s.ctrl.CreateVolume(ctx, req)
					return err
				})
				if landed {
					break
				}
				if attempt == killAttemptsOnNode {
					t.Fatalf("CreateVolume finished before %s in all %d attempts: the kill never landed", kp.what, attempt)
				}
				v.delete()
			}
			var resp *csi.CreateVolumeResponse
			s.retry(t, "CreateVolume "+v.id, func(ctx context.Context) error {
				var err error
				resp, err = s.ctrl.CreateVolume(ctx, req)
				return err
			})
			v.accept(resp)
			s.checkProvisioned(t, v)
			v.delete()
			if ids := st.backendVolumes(t); len(ids) != 0 {
				t.Errorf("after DeleteVolume the ZFS store still has volumes %v", ids)
			}
		})
	}

	t.Run("DeleteVolume/markedDeleted", func(t *testing.T) {
		parent := s.t
		s.t = t
		defer func() { s.t = parent }()
		id := "pvc-ckill-" + fixture.RandomHex(t, 4)
		v := s.createVolume(st, id, volumeSize)
		kp := killPoint{name: "markedDeleted", what: "the record is marked deleted", reached: func(v *v1alpha1.PillarVolumeState) bool {
			return !v.DeletionTimestamp.IsZero()
		}}
		s.killDuring(t, id, kp, func(ctx context.Context) error {
			_, err := s.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
			return err
		})
		if _, err := os.Stat(filepath.Join(fixture.NVMetRoot, "subsystems", v.nqn)); err == nil {
			t.Logf("the subsystem is still there after the kill: %s", describeSubsystem(v.nqn))
		}
		s.retry(t, "DeleteVolume "+id, func(ctx context.Context) error {
			_, err := s.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
			return err
		})
		v.deleted = true
		if ids := st.backendVolumes(t); len(ids) != 0 {
			t.Errorf("after the retried DeleteVolume the ZFS store still has volumes %v", ids)
		}
		if _, err := os.Stat(filepath.Join(fixture.NVMetRoot, "subsystems", v.nqn)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after the retried DeleteVolume the subsystem %s is still there (%v)", v.nqn, err)
		}
		if _, err := v.state(t); !apierrors.IsNotFound(err) {
			t.Errorf("after the retried DeleteVolume the PillarVolumeState: %v, want NotFound", err)
		}
	})

	// The later tests need a leader (the reconcilers, the export push);
	// the last SIGKILLed one never released the Lease.
	began := time.Now()
	if err := l.waitLease(t, holder); err != nil {
		t.Fatal(err)
	}
	t.Logf("the fresh controller took over the Lease %v after the last restart's checks (guest time)", time.Since(began).Round(time.Second))
}

// killDuring runs call in a goroutine and SIGKILLs pillar-controller as
// soon as a watch on volume id's PillarVolumeState shows kp (or its poll
// of the storage node does), then starts a fresh controller process and
// waits until it answers Probe ready. It reports whether the kill landed:
// a call that returns before a polled moment was seen is no failure, but
// one that returns before a moment its record shows is.
func (s *stack) killDuring(t *testing.T, id string, kp killPoint, call func(ctx context.Context) error) (landed bool) {
	l := s.l
	wc, err := client.NewWithWatch(l.adminConfig, client.Options{Scheme: l.admin.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), csiTimeout)
	defer cancel()
	w, err := wc.Watch(ctx, &v1alpha1.PillarVolumeStateList{}, &client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", id)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		err := call(ctx)
		done <- result{err, time.Since(began)}
	}()
	var seen *v1alpha1.PillarVolumeState
	var early *result
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for seen == nil && early == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of PillarVolumeState %s ended before %s", id, kp.what)
			}
			if v, isPVS := ev.Object.(*v1alpha1.PillarVolumeState); isPVS && ev.Type != watch.Deleted && kp.reached != nil && kp.reached(v) {
				seen = v
			}
		case <-poll.C:
			if kp.onNode != nil && kp.onNode(t, id) {
				seen = &v1alpha1.PillarVolumeState{}
			}
		case r := <-done:
			early = &r
		case <-ctx.Done():
			t.Fatalf("%s did not happen in %v", kp.what, csiTimeout)
		}
	}
	if early != nil {
		if kp.onNode != nil {
			t.Logf("the call returned (%v) after %v, before a poll saw %s: trying again", early.err, early.took, kp.what)
			return false
		}
		t.Fatalf("the call returned (%v) after %v, before %s: a kill would prove nothing", early.err, early.took, kp.what)
	}
	l.controller.kill()
	killed := time.Since(began)
	r := <-done
	if kp.onNode != nil {
		t.Logf("%s %v after the call began; pillar-controller SIGKILLed at %v; the call returned %v (%v)",
			kp.what, killed.Round(time.Millisecond), killed.Round(time.Millisecond), codeOf(r.err), r.err)
	} else {
		t.Logf("%s %v after the call began (resourceVersion %s: backendCreated %v, exported %v, generation %d); pillar-controller SIGKILLed at %v; the call returned %v (%v)",
			kp.what, killed.Round(time.Millisecond), seen.ResourceVersion, seen.Status.BackendCreated, seen.Status.Exported, seen.Spec.PublicationGeneration,
			killed.Round(time.Millisecond), codeOf(r.err), r.err)
	}
	st := s.stores[backendZFS]
	if pvs, err := (&volume{s: s, id: id}).state(t); err == nil {
		t.Logf("left behind: record backendCreated %v, exported %v, generation %d, deleting %v; zvols %v; subsystem: %s",
			pvs.Status.BackendCreated, pvs.Status.Exported, pvs.Spec.PublicationGeneration, !pvs.DeletionTimestamp.IsZero(), st.backendVolumes(t),
			describeSubsystem(nqnOf(t, id)))
	} else {
		t.Logf("left behind: record %v; zvols %v", err, st.backendVolumes(t))
	}

	restarted := time.Now()
	if err := l.launchController(); err != nil {
		t.Fatal(err)
	}
	s.reconnect(t)
	t.Logf("fresh pillar-controller answers Probe ready %v after its start (guest time)", time.Since(restarted).Round(time.Millisecond))
	return true
}

// reconnect dials the controller's socket afresh: the old connection's
// reconnect backoff has grown while no process listened.
func (s *stack) reconnect(t testing.TB) {
	conn, err := grpc.NewClient(s.l.csiEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// The connection outlives the subtest that made it: the stack's
	// later calls use it.
	s.root.Cleanup(func() { conn.Close() })
	waitProbe(t, "pillar-controller", csi.NewIdentityClient(conn), s.l.controller.exited)
	s.ctrl = csi.NewControllerClient(conn)
}

// retry repeats call until it succeeds, as the CSI sidecars do.
func (s *stack) retry(t *testing.T, what string, call func(ctx context.Context) error) {
	began := time.Now()
	for attempt := 1; ; attempt++ {
		err := call(csiCtx(t))
		if err == nil {
			t.Logf("%s succeeded at attempt %d, %v after the restart", what, attempt, time.Since(began).Round(time.Millisecond))
			return
		}
		t.Logf("%s attempt %d: %v", what, attempt, err)
		if time.Since(began) > healTimeout {
			t.Fatalf("%s still fails %v after the controller restart: %v", what, healTimeout, err)
		}
		time.Sleep(time.Second)
	}
}

// checkProvisioned checks what a completed CreateVolume leaves: one zvol
// of the name, the record backendCreated, exported and Ready, the export
// whole.
func (s *stack) checkProvisioned(t *testing.T, v *volume) {
	st := v.st
	if ids := st.backendVolumes(t); len(ids) != 1 || ids[0] != v.id {
		t.Errorf("after the retried CreateVolume the ZFS store has volumes %v, want exactly [%s]", ids, v.id)
	}
	pvs, err := v.state(t)
	if err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(pvs.Status.Conditions, v1alpha1.ConditionReady)
	if !pvs.Status.BackendCreated || !pvs.Status.Exported || c == nil || c.Status != metav1.ConditionTrue || pvs.Status.CapacityBytes < volumeSize ||
		!slices.Contains(pvs.Finalizers, csicontroller.Finalizer) {
		t.Errorf("PillarVolumeState: backendCreated %v, exported %v, Ready %v, capacity %d, finalizers %v; want a complete record",
			pvs.Status.BackendCreated, pvs.Status.Exported, c, pvs.Status.CapacityBytes, pvs.Finalizers)
	}
	if !exportWhole(v.nqn, s.port) {
		t.Errorf("the export is not whole: %s", describeSubsystem(v.nqn))
	}
	t.Logf("converged: %s; record generation %d; %s", fmt.Sprint(st.backendVolumes(t)), pvs.Spec.PublicationGeneration, describeSubsystem(v.nqn))
}

// nqnOf is the subsystem NQN api/export derives for volume id.
func nqnOf(t testing.TB, id string) string {
	ident, err := export.For(id)
	if err != nil {
		t.Fatal(err)
	}
	return ident.SubsystemNQN
}
