package controllerapp_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// TestImmutableFields changes fields the CRDs' CEL rules freeze. An API
// server that enforces CEL (1.25 and newer) refuses the change; an older
// one stores it, and the controller refuses to act on it instead: Ready
// False with ImmutableFieldChanged, an event, and no calls to the agent
// with the changed configuration.
func TestImmutableFields(t *testing.T) {
	ctx := context.Background()
	fa := startAgent(t, fakeagent.Options{NodeName: "storage-i", Version: "v1"})
	fa.SetStore("tank", fakeagent.Capacity{Total: 1 << 30, Available: 1 << 30})
	fa.SetStore("other", fakeagent.Capacity{Total: 1 << 30, Available: 1 << 30})
	a := agentObj("agent-i", "storage-i", "127.0.0.1", fa.Port())
	s := zfsStore("store-i", "agent-i", "tank")
	mustCreate(t, a, s)
	waitReady(t, s, metav1.ConditionTrue, v1alpha1.ReasonStoreAvailable, quick)
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)

	changed := s.DeepCopy()
	changed.Spec.ZFS.Pool = "other"
	err := admin.Update(ctx, changed)
	agentChanged := a.DeepCopy()
	agentChanged.Spec.NodeName = "storage-j"
	agentErr := admin.Update(ctx, agentChanged)
	t.Logf("kube-apiserver 1.%d: store update: %v; agent update: %v", serverVer, err, agentErr)
	if serverVer >= 25 {
		if !apierrors.IsInvalid(err) || !apierrors.IsInvalid(agentErr) {
			t.Fatalf("1.%d enforces CEL: want the updates refused as invalid, got %v and %v", serverVer, err, agentErr)
		}
		deleteAndWait(t, s, a)
		return
	}
	if err != nil || agentErr != nil {
		t.Fatalf("1.%d does not enforce CEL: want the updates stored, got %v and %v", serverVer, err, agentErr)
	}
	c := waitReady(t, changed, metav1.ConditionFalse, "ImmutableFieldChanged", quick)
	wantContains(t, "message", c.Message, `spec.zfs.pool was "tank" and is now "other"`, "create a new PillarStore")
	waitEvent(t, "store-i", "ImmutableFieldChanged", quick)
	c = waitReady(t, agentChanged, metav1.ConditionFalse, "ImmutableFieldChanged", quick)
	wantContains(t, "message", c.Message, `spec.nodeName was "storage-i" and is now "storage-j"`)

	// Changed back: accepted again.
	get(t, "store-i", changed)
	changed.Spec.ZFS.Pool = "tank"
	if err := admin.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	get(t, "agent-i", agentChanged)
	agentChanged.Spec.NodeName = "storage-i"
	if err := admin.Update(ctx, agentChanged); err != nil {
		t.Fatal(err)
	}
	waitReady(t, agentChanged, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)
	waitReady(t, changed, metav1.ConditionTrue, v1alpha1.ReasonStoreAvailable, quick)
	var st v1alpha1.PillarStore
	get(t, "store-i", &st)
	wantContains(t, "accepted-spec annotation", st.Annotations[reconcile.AcceptedSpecAnnotation], `"spec.zfs.pool":"tank"`)
	deleteAndWait(t, s, a)
}
