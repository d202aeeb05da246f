package controllerapp_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

const (
	quick = 15 * time.Second
	// noticeLoss bounds how long a lost agent may go unnoticed: the
	// health watch sees a closed connection at once.
	noticeLoss = 5 * time.Second
)

func TestAgentLifecycle(t *testing.T) {
	ctx := context.Background()
	storageNode(t, "storage-a", "127.0.0.1")
	fa := startAgent(t, fakeagent.Options{NodeName: "storage-a", Version: "v9.9.9"})
	a := agentObj("agent-a", "storage-a", "", fa.Port())
	mustCreate(t, a)

	// Reached through the Node's InternalIP.
	c := waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)
	wantContains(t, "Ready message", c.Message, "v9.9.9", "storage-a", fa.Addr())
	if a.Status.Endpoint != fa.Addr() || a.Status.AgentVersion != "v9.9.9" || a.Status.InstanceID != fa.InstanceID() || a.Status.BootID != fa.BootID() {
		t.Errorf("status = %+v, want endpoint %s, version v9.9.9, instance %s, boot %s", a.Status, fa.Addr(), fa.InstanceID(), fa.BootID())
	}
	eventually(t, quick, func() error {
		if n := restarts.count("agent-a"); n != 1 {
			return fmt.Errorf("OnAgentRestart called %d times for the first contact, want 1", n)
		}
		return nil
	})

	// A crashed agent is noticed by the health watch within seconds.
	start := time.Now()
	fa.Stop()
	c = waitReady(t, a, metav1.ConditionFalse, v1alpha1.ReasonUnreachable, noticeLoss)
	t.Logf("agent loss noticed after %v", time.Since(start).Round(10*time.Millisecond))
	wantContains(t, "Unreachable message", c.Message, fa.Addr(), "pillar-agent")
	waitEvent(t, "agent-a", v1alpha1.ReasonUnreachable, quick)

	// It comes back as a new instance: Ready again, the restart noticed and
	// signalled, the same boot.
	oldInstance := a.Status.InstanceID
	if err := fa.Restart(false); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)
	eventually(t, quick, func() error {
		get(t, "agent-a", a)
		if a.Status.InstanceID == oldInstance || a.Status.InstanceID != fa.InstanceID() {
			return fmt.Errorf("instance %s, want the new %s", a.Status.InstanceID, fa.InstanceID())
		}
		return nil
	})
	wantContains(t, "AgentRestarted event", waitEvent(t, "agent-a", "AgentRestarted", quick), fa.InstanceID())
	if n := restarts.count("agent-a"); n != 2 {
		t.Errorf("OnAgentRestart called %d times, want 2", n)
	}

	// A storage-node reboot: new boot ID.
	if err := fa.Restart(true); err != nil {
		t.Fatal(err)
	}
	wantContains(t, "NodeRebooted event", waitEvent(t, "agent-a", "NodeRebooted", quick), fa.BootID())
	get(t, "agent-a", a)
	if a.Status.BootID != fa.BootID() {
		t.Errorf("boot ID %s, want %s", a.Status.BootID, fa.BootID())
	}

	// NOT_SERVING from the health service.
	fa.SetServing(false)
	waitReady(t, a, metav1.ConditionFalse, v1alpha1.ReasonNotServing, quick)
	fa.SetServing(true)
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)

	// nvmet gone (the refresh sees it).
	fa.SetCapabilities(agentv1.Capability_CAPABILITY_BACKEND_ZFS)
	c = waitReady(t, a, metav1.ConditionFalse, v1alpha1.ReasonNvmetMissing, quick)
	wantContains(t, "NvmetMissing message", c.Message, "nvmet_tcp")
	fa.SetCapabilities(agentv1.Capability_CAPABILITY_BACKEND_ZFS, agentv1.Capability_CAPABILITY_TRANSPORT_NVMEOF_TCP)
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)

	// The agent put back exports something else removed: announced once
	// the refresh sees the count grow.
	fa.SetExportsRestored(2)
	wantContains(t, "ExportsRestored event", waitEvent(t, "agent-a", "ExportsRestored", quick), "put back 2 export(s)", "nvmetcli clear")

	// A change of address (spec.address now overrides the Node) reconnects.
	patch := client.MergeFrom(a.DeepCopy())
	a.Spec.Address = "127.0.0.1"
	if err := admin.Patch(ctx, a, patch); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)

	deleteAndWait(t, a)
}

func TestAgentMisconfigured(t *testing.T) {
	storageNode(t, "storage-m", "127.0.0.1")
	storageNode(t, "no-address", "")
	fa := startAgent(t, fakeagent.Options{NodeName: "storage-m", Version: "v1"})
	// An agent with a token this controller was not given (it sends none).
	locked := startAgent(t, fakeagent.Options{NodeName: "storage-m", Version: "v1", Token: strings.Repeat("t", 40)})

	cases := []struct {
		obj    *v1alpha1.PillarAgent
		reason string
		says   []string
	}{
		{agentObj("agent-no-node", "missing-node", "", fa.Port()), "NodeNotFound", []string{`"missing-node"`, "spec.address"}},
		{agentObj("agent-other-node", "some-other-node", "127.0.0.1", fa.Port()), v1alpha1.ReasonNodeMismatch, []string{`"storage-m"`, `"some-other-node"`}},
		{agentObj("agent-closed-port", "", "127.0.0.1", 1), v1alpha1.ReasonUnreachable, []string{"127.0.0.1:1"}},
		{agentObj("agent-other-token", "", "127.0.0.1", locked.Port()), v1alpha1.ReasonUnauthenticated, []string{"-agent-token-file", "-token-dir", "agent-token"}},
	}
	for _, c := range cases {
		mustCreate(t, c.obj)
	}
	for _, c := range cases {
		cond := waitReady(t, c.obj, metav1.ConditionFalse, c.reason, quick)
		wantContains(t, c.obj.Name+" message", cond.Message, c.says...)
		waitEvent(t, c.obj.Name, c.reason, quick)
	}
	// The agent of another node is not taken for this object's agent: no
	// instance recorded, no restart signalled.
	if c := cases[1].obj; c.Status.InstanceID != "" || restarts.count(c.Name) != 0 {
		t.Errorf("%s: instance %q recorded, %d restarts signalled; want none", c.Name, c.Status.InstanceID, restarts.count(c.Name))
	}
	for _, c := range cases {
		deleteAndWait(t, c.obj)
	}
}

func TestStoreCapacity(t *testing.T) {
	fa := startAgent(t, fakeagent.Options{NodeName: "storage-s", Version: "v1"})
	a := agentObj("agent-s", "", "127.0.0.1", fa.Port())
	s := zfsStore("store-s", "agent-s", "tank")
	lv := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: "store-thin"}, Spec: v1alpha1.PillarStoreSpec{
		AgentName: "agent-s", Type: v1alpha1.BackendLVM, LVM: &v1alpha1.LVMStore{VolumeGroup: "vg0", ThinPool: "thin"}}}

	// The agent does not exist yet.
	mustCreate(t, s)
	c := waitReady(t, s, metav1.ConditionFalse, v1alpha1.ReasonAgentNotFound, quick)
	wantContains(t, "message", c.Message, `"agent-s"`)

	// It does, but the pool does not.
	mustCreate(t, a, lv)
	c = waitReady(t, s, metav1.ConditionFalse, v1alpha1.ReasonPoolMissing, quick)
	wantContains(t, "message", c.Message, "tank", "zpool")

	// The pool appears: capacity in status.
	fa.SetStore("tank", fakeagent.Capacity{Total: 10 << 30, Available: 6 << 30})
	fa.SetStore("vg0", fakeagent.Capacity{Total: 4 << 30, Available: 12 << 30})
	c = waitReady(t, s, metav1.ConditionTrue, v1alpha1.ReasonStoreAvailable, quick)
	wantContains(t, "message", c.Message, "6.0 GiB of 10.0 GiB", "zfs tank/pillar")
	if got := s.Status.Capacity; got == nil || got.TotalBytes != 10<<30 || got.AvailableBytes != 6<<30 {
		t.Errorf("capacity = %+v, want 10 GiB / 6 GiB", got)
	}
	waitReady(t, lv, metav1.ConditionTrue, v1alpha1.ReasonStoreAvailable, quick)
	if got := lv.Status.Capacity; got == nil || got.AvailableBytes != 12<<30 {
		t.Errorf("thin capacity = %+v, want 12 GiB available (overcommitted)", got)
	}

	// The thin pool's zeroing is turned off on the node: refused with a
	// reason of its own until the PillarStore accepts the risk.
	fa.SetStore("vg0", fakeagent.Capacity{Total: 4 << 30, Available: 12 << 30, UnzeroedThinPool: true})
	c = waitReady(t, lv, metav1.ConditionFalse, v1alpha1.ReasonThinPoolNotZeroing, quick)
	wantContains(t, "message", c.Message, "does not zero", "lvchange --zero y vg0/thin", "spec.lvm.allowUnzeroedThinPool")
	patchLV := client.MergeFrom(lv.DeepCopy())
	lv.Spec.LVM.AllowUnzeroedThinPool = true
	if err := admin.Patch(context.Background(), lv, patchLV); err != nil {
		t.Fatal(err)
	}
	waitReady(t, lv, metav1.ConditionTrue, v1alpha1.ReasonStoreAvailable, quick)

	// Capacity changes are picked up by the refresh.
	fa.SetStore("tank", fakeagent.Capacity{Total: 10 << 30, Available: 5 << 30})
	eventually(t, quick, func() error {
		get(t, "store-s", s)
		if s.Status.Capacity == nil || s.Status.Capacity.AvailableBytes != 5<<30 {
			return fmt.Errorf("capacity %+v, want 5 GiB available", s.Status.Capacity)
		}
		return nil
	})

	// The backend's tools are missing on the node.
	fa.SetStore("tank", fakeagent.Capacity{Err: status.Error(codes.Unimplemented, "zfs: executable file not found in $PATH")})
	c = waitReady(t, s, metav1.ConditionFalse, v1alpha1.ReasonBackendToolsMissing, quick)
	wantContains(t, "message", c.Message, "zfs: executable file not found", "install the ZFS tools")

	// The agent goes away: the store follows the agent.
	fa.SetStore("tank", fakeagent.Capacity{Total: 10 << 30, Available: 5 << 30})
	waitReady(t, s, metav1.ConditionTrue, v1alpha1.ReasonStoreAvailable, quick)
	fa.Stop()
	c = waitReady(t, s, metav1.ConditionFalse, v1alpha1.ReasonAgentNotReady, quick)
	wantContains(t, "message", c.Message, `"agent-s"`, "Unreachable")
	if err := fa.Restart(false); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, metav1.ConditionTrue, v1alpha1.ReasonStoreAvailable, quick)

	deleteAndWait(t, s, lv, a)
}

func TestStorageClass(t *testing.T) {
	ctx := context.Background()
	fa := startAgent(t, fakeagent.Options{NodeName: "storage-c", Version: "v1"})
	fa.SetStore("tank", fakeagent.Capacity{Total: 1 << 30, Available: 1 << 30})
	a := agentObj("agent-c", "", "127.0.0.1", fa.Port())
	s := zfsStore("store-c", "agent-c", "tank")
	p := protocolObj("proto-c", "192.0.2.10")
	psc := classObj("fast", "store-c", "proto-c")

	// The class first: the StorageClass is created at once, Ready waits for
	// the store and protocol.
	mustCreate(t, psc)
	c := waitReady(t, psc, metav1.ConditionFalse, v1alpha1.ReasonStoreNotFound, quick)
	wantContains(t, "message", c.Message, `"store-c"`)
	waitEvent(t, "fast", "StorageClassCreated", quick)
	mustCreate(t, a, s, p)
	waitReady(t, psc, metav1.ConditionTrue, v1alpha1.ReasonInSync, quick)
	if psc.Status.StorageClassName != "fast" || !slices.Contains(psc.Finalizers, reconcile.Finalizer) {
		t.Errorf("status %+v, finalizers %v", psc.Status, psc.Finalizers)
	}

	var sc storagev1.StorageClass
	get(t, "fast", &sc)
	wantParams := map[string]string{v1alpha1.StorageClassParamStore: "store-c", v1alpha1.StorageClassParamProtocol: "proto-c", v1alpha1.StorageClassParamFSType: "ext4"}
	if sc.Provisioner != "pillar-csi.io" || !maps.Equal(sc.Parameters, wantParams) || *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		*sc.VolumeBindingMode != storagev1.VolumeBindingImmediate || !*sc.AllowVolumeExpansion || !slices.Equal(sc.MountOptions, []string{"noatime"}) ||
		!metav1.IsControlledBy(&sc, psc) || sc.Labels[reconcile.ManagedByLabel] != reconcile.ManagedByValue {
		t.Errorf("StorageClass = %+v", sc)
	}

	// The protocol lists the class.
	waitReady(t, p, metav1.ConditionTrue, v1alpha1.ReasonProtocolAccepted, quick)
	eventually(t, quick, func() error {
		get(t, "proto-c", p)
		if !slices.Equal(p.Status.StorageClasses, []string{"fast"}) {
			return fmt.Errorf("protocol's classes = %v", p.Status.StorageClasses)
		}
		return nil
	})

	// Someone edits the StorageClass's mutable fields: put back.
	sc.AllowVolumeExpansion = ptr.To(false)
	sc.MountOptions = []string{"sync"}
	if err := admin.Update(ctx, &sc); err != nil {
		t.Fatal(err)
	}
	eventually(t, quick, func() error {
		get(t, "fast", &sc)
		if !*sc.AllowVolumeExpansion || !slices.Equal(sc.MountOptions, []string{"noatime"}) {
			return fmt.Errorf("StorageClass not put back: allowVolumeExpansion %v, mountOptions %v", *sc.AllowVolumeExpansion, sc.MountOptions)
		}
		return nil
	})
	waitEvent(t, "fast", "StorageClassUpdated", quick)

	// The PillarStorageClass's mutable fields flow into the StorageClass.
	get(t, "fast", psc)
	patch := client.MergeFrom(psc.DeepCopy())
	psc.Spec.MountOptions = []string{"noatime", "discard"}
	if err := admin.Patch(ctx, psc, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, quick, func() error {
		get(t, "fast", &sc)
		if !slices.Equal(sc.MountOptions, []string{"noatime", "discard"}) {
			return fmt.Errorf("mountOptions %v", sc.MountOptions)
		}
		return nil
	})

	// Someone deletes it: created again, with a warning.
	oldUID := sc.UID
	if err := admin.Delete(ctx, &sc); err != nil {
		t.Fatal(err)
	}
	eventually(t, quick, func() error {
		var again storagev1.StorageClass
		if err := admin.Get(ctx, client.ObjectKey{Name: "fast"}, &again); err != nil {
			return err
		}
		if again.UID == oldUID {
			return fmt.Errorf("still the old StorageClass")
		}
		return nil
	})
	waitEvent(t, "fast", "StorageClassRecreated", quick)

	// A StorageClass of the same name made by someone else is never taken
	// over.
	foreign := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "taken"}, Provisioner: "example.com/other",
		Parameters: map[string]string{"x": "y"}}
	mustCreate(t, foreign)
	taken := classObj("taken", "store-c", "proto-c")
	mustCreate(t, taken)
	c = waitReady(t, taken, metav1.ConditionFalse, v1alpha1.ReasonConflict, quick)
	wantContains(t, "message", c.Message, `StorageClass "taken"`, "not created by this PillarStorageClass")
	get(t, "taken", foreign)
	if foreign.Provisioner != "example.com/other" || len(foreign.OwnerReferences) != 0 {
		t.Errorf("foreign StorageClass was changed: %+v", foreign)
	}
	// Deleting the class leaves the foreign StorageClass alone.
	deleteAndWait(t, taken)
	get(t, "taken", foreign)

	// The store becomes unready: so does the class.
	fa.SetStore("tank", fakeagent.Capacity{Err: status.Error(codes.FailedPrecondition, "pool tank is gone")})
	c = waitReady(t, psc, metav1.ConditionFalse, v1alpha1.ReasonStoreNotReady, quick)
	wantContains(t, "message", c.Message, `"store-c"`, "pool tank is gone")

	// Deleting the class deletes its StorageClass.
	deleteAndWait(t, psc)
	eventually(t, quick, func() error {
		err := admin.Get(ctx, client.ObjectKey{Name: "fast"}, &sc)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("StorageClass fast still there: %v", err)
	})
	eventually(t, quick, func() error {
		get(t, "proto-c", p)
		if len(p.Status.StorageClasses) != 0 {
			return fmt.Errorf("protocol's classes = %v after the class was deleted", p.Status.StorageClasses)
		}
		return nil
	})
	deleteAndWait(t, foreign, p, s, a)
}

func TestProtocolValidation(t *testing.T) {
	p := protocolObj("proto-v6", "2001:db8::10")
	p.Spec.NVMeOFTCP.ACLEnabled = ptr.To(false)
	mustCreate(t, p)
	c := waitReady(t, p, metav1.ConditionTrue, v1alpha1.ReasonProtocolAccepted, quick)
	wantContains(t, "message", c.Message, "2001:db8::10 port 4420", "any host")
	deleteAndWait(t, p)
}

// TestMetrics reads pillar's and controller-runtime's metrics from the one
// /metrics endpoint.
func TestMetrics(t *testing.T) {
	fa := startAgent(t, fakeagent.Options{NodeName: "storage-x", Version: "v1"})
	a := agentObj("agent-metrics", "", "127.0.0.1", fa.Port())
	mustCreate(t, a)
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)
	eventually(t, quick, func() error {
		resp, err := http.Get(metricsURL)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, want := range []string{`pillar_controller_agent_ready{agent="agent-metrics"} 1`, `pillar_controller_build_info{version="v0.0.0-test"} 1`,
			`controller_runtime_reconcile_total{controller="pillaragent",result="success"}`} {
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})
	deleteAndWait(t, a)
}
