package controllerapp_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// TestStoreAndAgentWaitForTheirVolumes: a PillarStore and the PillarAgent
// of its node, deleted while a volume lives on the store, stay (in-use
// finalizer), say which volume they wait for, take no new volume and
// still serve the old one; once it is deleted both go.
func TestStoreAndAgentWaitForTheirVolumes(t *testing.T) {
	ctx := context.Background()
	v := newVolumeSetup(t, "inuse", "192.0.2.30")
	fa, a, s := v.fa, v.agent, v.store
	t.Cleanup(func() { deleteAndWait(t, v.class, v.proto) })
	for _, o := range []client.Object{a, s} {
		eventually(t, quick, func() error {
			get(t, o.GetName(), o)
			if !slices.Contains(o.GetFinalizers(), reconcile.InUseFinalizer) {
				return fmt.Errorf("%s has finalizers %v, want %s", o.GetName(), o.GetFinalizers(), reconcile.InUseFinalizer)
			}
			return nil
		})
	}
	cc := csi.NewControllerClient(csiConn(t))
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	create := func(name string) error {
		_, err := v.createVolume(cctx, cc, name)
		return err
	}
	if err := create("pvc-inuse-1"); err != nil {
		t.Fatal(err)
	}

	for _, o := range []client.Object{s, a} {
		if err := admin.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	c := waitReady(t, s, metav1.ConditionFalse, v1alpha1.ReasonDeletionWaitsForVolumes, quick)
	wantContains(t, "the store's condition", c.Message, "pvc-inuse-1", "1 still do")
	c = waitReady(t, a, metav1.ConditionFalse, v1alpha1.ReasonDeletionWaitsForVolumes, quick)
	wantContains(t, "the agent's condition", c.Message, "pvc-inuse-1")
	waitEvent(t, "store-inuse", v1alpha1.ReasonDeletionWaitsForVolumes, quick)
	if err := create("pvc-inuse-2"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a new volume on a store being deleted: %v, want FAILED_PRECONDITION", err)
	}
	if _, ok := fa.Volumes()["pvc-inuse-2"]; ok {
		t.Error("a volume was created on a store being deleted")
	}
	time.Sleep(2 * time.Second) // a reconcile or two later, both are still there
	get(t, s.Name, s)
	get(t, a.Name, a)

	// The old volume is still served: its deletion goes through the agent.
	if _, err := cc.DeleteVolume(cctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-inuse-1"}); err != nil {
		t.Fatal(err)
	}
	if len(fa.Volumes()) != 0 {
		t.Errorf("left on the agent: %v", fa.Volumes())
	}
	deleteAndWait(t, s, a)
}

// TestMarksStorePinned: the controller pins the identity of an agent's
// fencing marks store; an agent that comes back with another one (its
// marks lost) is not Ready, no volume call goes to it, and nothing is
// pushed to it, until the PillarAgent is annotated with the new identity.
func TestMarksStorePinned(t *testing.T) {
	ctx := context.Background()
	const first, second = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	v := newVolumeSetup(t, "pin", "192.0.2.31", func(fa *fakeagent.Agent) { fa.SetMarksStoreID(first) })
	fa, a := v.fa, v.agent
	t.Cleanup(func() { deleteAndWait(t, v.class, v.proto, v.store, v.agent) })
	get(t, a.Name, a)
	if a.Status.MarksStoreID != first {
		t.Fatalf("status.marksStoreID %q, want %q", a.Status.MarksStoreID, first)
	}

	// The storage node comes back with its marks directory wiped.
	fa.SetMarksStoreID(second)
	if err := fa.Restart(false); err != nil {
		t.Fatal(err)
	}
	c := waitReady(t, a, metav1.ConditionFalse, v1alpha1.ReasonMarksStoreChanged, quick)
	wantContains(t, "the agent's condition", c.Message, first, second, v1alpha1.AnnotationAcceptMarksStore+"="+second)
	cc := csi.NewControllerClient(csiConn(t))
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := v.createVolume(cctx, cc, "pvc-pin-1")
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("CreateVolume on an agent that lost its marks: %v, want FAILED_PRECONDITION", err)
	}
	if n := len(fa.Volumes()); n != 0 {
		t.Errorf("%d volumes reached the agent", n)
	}
	if n := restarts.count("agent-pin"); n != 1 {
		t.Errorf("OnAgentRestart called %d times, want 1 (the first contact; not for the lost store)", n)
	}

	// The operator accepts the new store.
	get(t, a.Name, a)
	a.Annotations = map[string]string{v1alpha1.AnnotationAcceptMarksStore: second}
	if err := admin.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)
	waitEvent(t, "agent-pin", "MarksStoreAccepted", quick)
	get(t, a.Name, a)
	if a.Status.MarksStoreID != second {
		t.Errorf("status.marksStoreID %q after the acceptance, want %q", a.Status.MarksStoreID, second)
	}
	// The refused CreateVolume left its record, as a CSI call that failed
	// half-way does; the provisioner's retry would finish it. Here it
	// is deleted, through the agent that is now accepted.
	eventually(t, quick, func() error {
		_, err := cc.DeleteVolume(cctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-pin-1"})
		return err
	})
}
