package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// Status is a subresource on every kind: the main endpoint ignores status
// and the status endpoint ignores spec, so a controller writing progress can
// never clobber the spec (or the fencing generation in it), and a spec
// writer can never forge progress.
func TestStatusIsASubresource(t *testing.T) {
	c := ctx(t)
	vs := volumeState("status-sub")
	vs.Status.BackendCreated = true // dropped on create: status is not writable here
	if err := k8s.Create(c, vs, strict); err != nil {
		t.Fatal(err)
	}
	if vs.Status.BackendCreated {
		t.Fatalf("create wrote status through the main endpoint")
	}
	gen := vs.Generation

	vs.Status = v1alpha1.PillarVolumeStateStatus{
		ObservedGeneration: gen,
		BackendCreated:     true,
		Exported:           true,
		CapacityBytes:      vs.Spec.CapacityBytes,
		Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Exported",
			Message: "exported on 192.0.2.10:4420", ObservedGeneration: gen, LastTransitionTime: metav1.Now(),
		}},
	}
	vs.Spec.CapacityBytes *= 2 // must be ignored by the status endpoint
	if err := k8s.Status().Update(c, vs); err != nil {
		t.Fatalf("status update: %v", err)
	}

	var got v1alpha1.PillarVolumeState
	if err := k8s.Get(c, client.ObjectKeyFromObject(vs), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Status.BackendCreated || !got.Status.Exported || len(got.Status.Conditions) != 1 {
		t.Fatalf("status not written: %+v", got.Status)
	}
	if got.Spec.CapacityBytes != 1<<30 {
		t.Fatalf("status update changed spec.capacityBytes to %d", got.Spec.CapacityBytes)
	}
	if got.Generation != gen {
		t.Fatalf("status update bumped metadata.generation from %d to %d", gen, got.Generation)
	}

	got.Status.Exported = false // must be ignored by the main endpoint
	got.Spec.PublicationGeneration++
	if err := k8s.Update(c, &got, strict); err != nil {
		t.Fatal(err)
	}
	var after v1alpha1.PillarVolumeState
	if err := k8s.Get(c, client.ObjectKeyFromObject(vs), &after); err != nil {
		t.Fatal(err)
	}
	if !after.Status.Exported {
		t.Fatalf("spec update changed status")
	}
	if after.Generation != gen+1 {
		t.Fatalf("spec update: metadata.generation = %d, want %d", after.Generation, gen+1)
	}
}

// Every kind has the status subresource, not only PillarVolumeState.
func TestEveryKindHasStatusSubresource(t *testing.T) {
	c := ctx(t)
	ready := []metav1.Condition{{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reconciled",
		Message: "ok", LastTransitionTime: metav1.Now(),
	}}
	a, s, p, sc := agent("status-agent"), zfsStore("status-store"), protocol("status-protocol"), storageClass("status-class")
	for _, o := range []struct {
		obj        client.Object
		conditions *[]metav1.Condition
	}{
		{a, &a.Status.Conditions},
		{s, &s.Status.Conditions},
		{p, &p.Status.Conditions},
		{sc, &sc.Status.Conditions},
	} {
		if err := k8s.Create(c, o.obj, strict); err != nil {
			t.Fatal(err)
		}
		*o.conditions = ready
		if err := k8s.Update(c, o.obj, strict); err != nil {
			t.Fatal(err)
		}
		if len(*o.conditions) != 0 {
			t.Errorf("%T: the main endpoint wrote status", o.obj)
			continue
		}
		*o.conditions = ready
		if err := k8s.Status().Update(c, o.obj); err != nil {
			t.Errorf("%T: status update: %v", o.obj, err)
			continue
		}
		if len(*o.conditions) != 1 {
			t.Errorf("%T: the status endpoint did not write status", o.obj)
		}
	}
}
