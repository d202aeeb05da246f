package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// recorded is one event as the recorder was asked to make it.
type recorded struct {
	regarding, related runtime.Object
	typ, reason, note  string
}

// captureRecorder keeps every event with the objects it is about.
type captureRecorder struct {
	mu     sync.Mutex
	events []recorded
}

func (r *captureRecorder) Eventf(regarding, related runtime.Object, typ, reason, _ string, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, recorded{regarding, related, typ, reason, fmt.Sprintf(note, args...)})
}

// about returns the events whose regarding object is a claim, or a record.
func (r *captureRecorder) about(claims bool) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recorded
	for _, e := range r.events {
		if _, ok := e.regarding.(*corev1.PersistentVolumeClaim); ok == claims {
			out = append(out, e)
		}
	}
	return out
}

// TestEventsOnTheClaim: the events of a volume created for a claim land on
// the claim too (with its UID, which kubectl describe selects by, and the
// record as the related object), not only on the PillarVolumeState; a
// volume whose claim does not exist gets them on its record alone.
func TestEventsOnTheClaim(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	ns := "claims-" + strings.ToLower(uniq("ns"))
	if err := cluster.Admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resourceQuantity("8Mi")}}}}
	if err := cluster.Admin.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	rec := &captureRecorder{}
	pool := agentclient.NewPool(agentclient.Options{CallTimeout: 5 * time.Second})
	defer pool.Close()
	s := controller.New(controller.Config{Client: user, Reader: user, Recorder: rec, Connector: &reconcile.Connector{Client: user, Pool: pool}})

	id := uniq("pvc-events")
	req := createReq(id, 8<<20)
	req.Parameters["csi.storage.k8s.io/pvc/namespace"] = ns
	if _, err := s.CreateVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	settle(t, s)
	claimEvents := rec.about(true)
	var reasons []string
	for _, e := range claimEvents {
		got := e.regarding.(*corev1.PersistentVolumeClaim)
		if got.UID != pvc.UID || got.Namespace != ns || got.Name != "data" {
			t.Errorf("event %s is about claim %s/%s (UID %s), want %s/data (UID %s)", e.reason, got.Namespace, got.Name, got.UID, ns, pvc.UID)
		}
		if v, ok := e.related.(*v1alpha1.PillarVolumeState); !ok || v.Name != id {
			t.Errorf("event %s on the claim relates to %v, want the record %s", e.reason, e.related, id)
		}
		if !strings.HasPrefix(e.note, "volume "+id+": ") {
			t.Errorf("event %s on the claim says %q, which does not name the volume first", e.reason, e.note)
		}
		reasons = append(reasons, e.reason)
	}
	if strings.Join(reasons, ",") != "Provisioned,Published" {
		t.Errorf("events on the claim: %q, want Provisioned,Published", reasons)
	}
	if n := len(rec.about(false)); n != 2 {
		t.Errorf("%d events on the record, want 2 (Provisioned, Published)", n)
	}

	// No such claim: the record alone.
	rec2 := &captureRecorder{}
	s2 := controller.New(controller.Config{Client: user, Reader: user, Recorder: rec2, Connector: &reconcile.Connector{Client: user, Pool: pool}})
	orphan := uniq("pvc-noclaim")
	if _, err := s2.CreateVolume(ctx, createReq(orphan, 8<<20)); err != nil {
		t.Fatal(err)
	}
	settle(t, s2)
	if len(rec2.about(true)) != 0 || len(rec2.about(false)) != 1 {
		t.Errorf("a volume without an existing claim: %d events on claims, %d on the record; want 0 and 1", len(rec2.about(true)), len(rec2.about(false)))
	}
	for _, id := range []string{id, orphan} {
		if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatal(err)
		}
	}
	// The claim's events name the node, never its host NQN (a worker's
	// identity on the storage network, which the tenant has no use for).
	settle(t, s)
	var notes []string
	for _, e := range rec.about(true) {
		notes = append(notes, e.reason+": "+e.note)
		if strings.Contains(e.note, hostA) {
			t.Errorf("event %s on the claim names the host NQN: %q", e.reason, e.note)
		}
	}
	if all := strings.Join(notes, "\n"); !strings.Contains(all, "Published: volume "+id+": published to node worker-a (") ||
		!strings.Contains(all, "Unpublished: volume "+id+": unpublished from [worker-a]") {
		t.Errorf("events on the claim:\n%s\nwant Published and Unpublished naming node worker-a", all)
	}
}

// settle waits until s has made every claim event it raised.
func settle(t *testing.T, s *controller.Service) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !controller.EventsIdle(s); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the claims' events are still being made after 10s")
		}
	}
}
