package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// TestPushExports: a storage-node reboot empties configfs; the push puts
// every exported volume's export back, with exactly the hosts of its
// publications, each under a fresh token.
func TestPushExports(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s := newService(t)
	pub, idle := uniq("pvc-push-pub"), uniq("pvc-push-idle")
	for _, id := range []string{pub, idle} {
		if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: pub, NodeId: nodeA, VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	before := record(t, pub).Spec.PublicationGeneration

	agent.WipeExports()
	got, err := newService(t).PushExports(ctx, "storage-1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Restored, pub) || !slices.Contains(got.Restored, idle) || !got.Done() {
		t.Errorf("pushed = %+v, want %s and %s restored, nothing failed", got, pub, idle)
	}
	ex := agent.Exports()
	if e, ok := ex[pub]; !ok || !e.ACL || !slices.Equal(e.Hosts, []string{hostA}) {
		t.Errorf("export of the published volume = %+v, %v: want ACL on with node A's host only", e, ok)
	}
	if e, ok := ex[idle]; !ok || len(e.Hosts) != 0 {
		t.Errorf("export of the unpublished volume = %+v, %v: want no host", e, ok)
	}
	if g := record(t, pub).Spec.PublicationGeneration; g != before+1 {
		t.Errorf("generation %d after the push, want %d: one fresh token per entry", g, before+1)
	}

	// Clean up, with the exports gone again: teardown and unpublish take
	// that in their stride.
	agent.WipeExports()
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: idle}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: pub, NodeId: nodeA}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: pub}); err != nil {
		t.Fatal(err)
	}
}

// TestReplacedLifecycle: a record removed by hand (its finalizer stripped)
// while its volume lives on the agent. A new volume of the same name is a
// new lifecycle, which the agent refuses to let take the old volume over;
// the refusal is reported and counted, and the old data is untouched.
func TestReplacedLifecycle(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m, err := controller.NewMetrics(reg, user)
	if err != nil {
		t.Fatal(err)
	}
	pool := agentclient.NewPool(agentclient.Options{CallTimeout: 5 * time.Second})
	defer pool.Close()
	rec := events.NewFakeRecorder(16)
	s := controller.New(controller.Config{Client: user, Reader: user, Metrics: m, Recorder: rec, Connector: &reconcile.Connector{Client: user, Pool: pool}})
	id := uniq("pvc-handremoved")
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	v := record(t, id)
	v.Finalizers = nil
	if err := cluster.Admin.Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Admin.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		var gone v1alpha1.PillarVolumeState
		if err := cluster.Admin.Get(ctx, types.NamespacedName{Name: id}, &gone); err == nil {
			return fmt.Errorf("record still there")
		}
		return nil
	})
	_, err = s.CreateVolume(ctx, createReq(id, 8<<20))
	wantCode(t, "CreateVolume over a volume of a lost record", err, codes.FailedPrecondition, "REASON_LIFECYCLE_REPLACED")
	if got := rejections(t, reg, "REASON_LIFECYCLE_REPLACED"); got != 1 {
		t.Errorf("fencing rejections counted: %v, want 1", got)
	}
	if _, ok := agent.Volumes()[id]; !ok {
		t.Error("the old volume is gone")
	}
	var seen []string
	for len(rec.Events) > 0 {
		seen = append(seen, <-rec.Events)
	}
	if !slices.ContainsFunc(seen, func(e string) bool { return strings.HasPrefix(e, "Normal Provisioned") }) ||
		!slices.ContainsFunc(seen, func(e string) bool {
			return strings.HasPrefix(e, "Warning FencingRefused") && strings.Contains(e, "REASON_LIFECYCLE_REPLACED")
		}) {
		t.Errorf("events on the records = %q, want Provisioned and FencingRefused", seen)
	}
}

func eventually(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rejections reads pillar_controller_fencing_rejections_total{reason}.
func rejections(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "pillar_controller_fencing_rejections_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
