package controllerapp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
)

// eventually retries f every 100 ms until it returns nil or d passes, then
// fails with f's last error.
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func conditions(o client.Object) []metav1.Condition {
	switch o := o.(type) {
	case *v1alpha1.PillarAgent:
		return o.Status.Conditions
	case *v1alpha1.PillarStore:
		return o.Status.Conditions
	case *v1alpha1.PillarProtocol:
		return o.Status.Conditions
	case *v1alpha1.PillarStorageClass:
		return o.Status.Conditions
	}
	panic(fmt.Sprintf("no conditions on %T", o))
}

// waitReady waits until obj's Ready condition has the status and reason,
// and returns the condition (obj holds the object as last read).
func waitReady(t *testing.T, obj client.Object, status metav1.ConditionStatus, reason string, d time.Duration) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	eventually(t, d, func() error {
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(conditions(obj), v1alpha1.ConditionReady)
		if c == nil {
			return fmt.Errorf("%s: no Ready condition yet", obj.GetName())
		}
		got = *c
		if c.Status != status || c.Reason != reason {
			return fmt.Errorf("%s: Ready = %s/%s (%s), want %s/%s", obj.GetName(), c.Status, c.Reason, c.Message, status, reason)
		}
		if c.ObservedGeneration != obj.GetGeneration() {
			return fmt.Errorf("%s: condition of generation %d, object at %d", obj.GetName(), c.ObservedGeneration, obj.GetGeneration())
		}
		return nil
	})
	return got
}

// waitEvent waits for an event about the named object with the reason,
// and returns its note.
func waitEvent(t *testing.T, name, reason string, d time.Duration) string {
	t.Helper()
	var note string
	eventually(t, d, func() error {
		var l eventsv1.EventList
		if err := admin.List(context.Background(), &l); err != nil {
			return err
		}
		var seen []string
		for _, e := range l.Items {
			if e.Regarding.Name != name {
				continue
			}
			if e.Reason == reason {
				note = e.Note
				return nil
			}
			seen = append(seen, e.Reason)
		}
		return fmt.Errorf("no %s event about %s (seen: %v)", reason, name, seen)
	})
	return note
}

func mustCreate(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := admin.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// deleteAndWait deletes objs and waits until they are gone (finalizers
// included).
func deleteAndWait(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := client.IgnoreNotFound(admin.Delete(context.Background(), o)); err != nil {
			t.Fatalf("delete %s: %v", o.GetName(), err)
		}
	}
	for _, o := range objs {
		eventually(t, 20*time.Second, func() error {
			err := admin.Get(context.Background(), client.ObjectKeyFromObject(o), o)
			if err == nil {
				return fmt.Errorf("%s still exists (finalizers %v)", o.GetName(), o.GetFinalizers())
			}
			return client.IgnoreNotFound(err)
		})
	}
}

// storageNode creates a Node whose InternalIP is ip, as kubelet would
// report it.
func storageNode(t *testing.T, name, ip string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	mustCreate(t, n)
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
	if err := admin.Status().Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), n) })
	return n
}

// startAgent serves a fake agent for node and stops it at the end.
func startAgent(t *testing.T, o fakeagent.Options) *fakeagent.Agent {
	t.Helper()
	a, err := fakeagent.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

func agentObj(name, node, address string, port int32) *v1alpha1.PillarAgent {
	return &v1alpha1.PillarAgent{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PillarAgentSpec{NodeName: v1alpha1.ObjectName(node), Address: address, Port: port}}
}

func zfsStore(name, agent, pool string) *v1alpha1.PillarStore {
	return &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.PillarStoreSpec{
		AgentName: v1alpha1.ObjectName(agent), Type: v1alpha1.BackendZFS, ZFS: &v1alpha1.ZFSStore{Pool: pool, ParentDataset: "pillar"}}}
}

func protocolObj(name, addr string) *v1alpha1.PillarProtocol {
	return &v1alpha1.PillarProtocol{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.PillarProtocolSpec{
		Type: v1alpha1.ProtocolNVMeOFTCP, NVMeOFTCP: &v1alpha1.NVMeOFTCPProtocol{BindAddress: v1alpha1.IPAddress(addr)}}}
}

func classObj(name, store, proto string) *v1alpha1.PillarStorageClass {
	return &v1alpha1.PillarStorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.PillarStorageClassSpec{
		StoreName: v1alpha1.ObjectName(store), ProtocolName: v1alpha1.ObjectName(proto), MountOptions: []string{"noatime"}}}
}

func get(t *testing.T, name string, obj client.Object) {
	t.Helper()
	if err := admin.Get(context.Background(), types.NamespacedName{Name: name}, obj); err != nil {
		t.Fatal(err)
	}
}

func wantContains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s = %q, want it to mention %q", what, s, sub)
		}
	}
}

// volumeSetup is a fake agent with volumes on a 1 GiB pool "tank", and
// the PillarAgent, PillarStore, PillarProtocol and PillarStorageClass of
// it, named <kind>-<name>, the class in sync.
type volumeSetup struct {
	fa    *fakeagent.Agent
	agent *v1alpha1.PillarAgent
	store *v1alpha1.PillarStore
	proto *v1alpha1.PillarProtocol
	class *v1alpha1.PillarStorageClass
	// params are the parameters of the generated StorageClass, as the
	// provisioner passes them.
	params map[string]string
}

// newVolumeSetup makes a volumeSetup; prepare runs on the fake agent
// before the objects exist. The objects are left to the test to delete.
func newVolumeSetup(t *testing.T, name, addr string, prepare ...func(*fakeagent.Agent)) *volumeSetup {
	t.Helper()
	fa := startAgent(t, fakeagent.Options{NodeName: "storage-" + name, Version: "v1"})
	if err := fa.EnableVolumes(t.TempDir(), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fa.CloseVolumes)
	fa.SetStore("tank", fakeagent.Capacity{Total: 1 << 30, Available: 1 << 30})
	for _, p := range prepare {
		p(fa)
	}
	v := &volumeSetup{fa: fa, agent: agentObj("agent-"+name, "", "127.0.0.1", fa.Port()), store: zfsStore("store-"+name, "agent-"+name, "tank"),
		proto: protocolObj("proto-"+name, addr), class: classObj("class-"+name, "store-"+name, "proto-"+name)}
	mustCreate(t, v.agent, v.store, v.proto, v.class)
	waitReady(t, v.class, metav1.ConditionTrue, v1alpha1.ReasonInSync, quick)
	var sc storagev1.StorageClass
	get(t, v.class.Name, &sc)
	v.params = sc.Parameters
	return v
}

// mountRWO is the capability of an ext4 ReadWriteOnce claim.
var mountRWO = &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}}

// csiConn is a connection to pillar-controller's CSI endpoint, as the
// sidecars have one.
func csiConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+csiSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// createVolume asks for a 64 MiB ReadWriteOnce volume of the setup's class.
func (v *volumeSetup) createVolume(ctx context.Context, cc csi.ControllerClient, name string) (*csi.CreateVolumeResponse, error) {
	return cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{mountRWO}, Parameters: v.params})
}
