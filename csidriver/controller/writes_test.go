package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// recordCalls counts the calls a service makes on PillarVolumeStates, by
// verb.
type recordCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *recordCalls) count(verb string, obj any) {
	switch obj.(type) {
	case *v1alpha1.PillarVolumeState, *v1alpha1.PillarVolumeStateList:
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n[verb]++
	}
}

func (c *recordCalls) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// countingService is newService with every PillarVolumeState call counted:
// writes, reads of the API server (its Reader) and reads of what is the
// informer cache in pillar-controller (its Client).
func countingService(t *testing.T) (*controller.Service, *recordCalls) {
	t.Helper()
	ww, err := client.NewWithWatch(cluster.User, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	calls := &recordCalls{n: map[string]int{}}
	c := interceptor.NewClient(ww, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			calls.count("cached get", obj)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			calls.count("cached list", list)
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			calls.count("write", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			calls.count("write", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			calls.count("write", obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			calls.count("write", obj)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			calls.count("write", obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			calls.count("write", obj)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	// The Reader reads the API server; the Client's reads are the
	// informer cache's in pillar-controller.
	r := interceptor.NewClient(ww, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			calls.count("get", obj)
			return c.Get(ctx, key, obj, opts...)
		},
	})
	pool := agentclient.NewPool(agentclient.Options{CallTimeout: 5 * time.Second})
	t.Cleanup(pool.Close)
	return controller.New(controller.Config{Client: c, Reader: r, Connector: &reconcile.Connector{Client: c, Pool: pool}}), calls
}

// TestRecordWrites: a claim's volume costs three writes of its record from
// CreateVolume to a published volume, and three for DeleteVolume: the record itself, its status once
// the volume is exported (one token for the create and the export), and
// the publication's compare-and-swap, which issues the publication's
// token; and no read of it from the API server, the publication starting
// from the informer cache. docs/architecture.md, "One token per CSI call",
// says why no other write is needed.
func TestRecordWrites(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s, calls := countingService(t)
	id := uniq("pvc-writes")
	if _, err := s.CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	if n := calls.take(); n["write"] != 2 || n["get"] != 0 {
		t.Errorf("CreateVolume: %d writes and %d API server reads of the record, want 2 and 0 (%v)", n["write"], n["get"], n)
	}
	if c, e := agent.Presented("CreateVolume", id), agent.Presented("ExportVolume", id); len(c) != 1 || len(e) != 1 || c[0] != 1 || e[0] != 1 {
		t.Errorf("the agent saw generations %v (CreateVolume), %v (ExportVolume); want the record's first for both", c, e)
	}
	if _, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	if n := calls.take(); n["write"] != 1 || n["get"] != 0 {
		t.Errorf("ControllerPublishVolume: %d writes and %d API server reads of the record, want 1 and 0: it starts from the cache (%v)", n["write"], n["get"], n)
	}
	if v := record(t, id); v.Spec.PublicationGeneration != 2 || len(v.Spec.Publications) != 1 {
		t.Errorf("after the publication: generation %d, publications %v; want 2 and node A", v.Spec.PublicationGeneration, v.Spec.Publications)
	}
	if _, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA}); err != nil {
		t.Fatal(err)
	}
	calls.take()
	// DeleteVolume: the record marked deleted, the token of the one agent
	// call that removes export and volume, the finalizer dropped; no
	// separate unexport and no status write between.
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	if n := calls.take(); n["write"] != 3 {
		t.Errorf("DeleteVolume: %d writes of the record, want 3 (%v)", n["write"], n)
	}
	if u := agent.Presented("UnexportVolume", id); len(u) != 0 {
		t.Errorf("DeleteVolume called UnexportVolume with generations %v: the agent's DeleteVolume removes the export", u)
	}
	if _, ok := agent.Exports()[id]; ok {
		t.Error("the export is still there after DeleteVolume")
	}
}

// TestPublishFromStaleCache: ControllerPublishVolume starts from the
// informer cache, and a cache that lags changes nothing: a record not in
// the cache yet, and one at an old resourceVersion, are decided again on a
// fresh read, and the publication is made once, under a token of its own.
func TestPublishFromStaleCache(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		stale func(t *testing.T, id string) func(obj client.Object) error
	}{
		{"not in the cache yet", func(t *testing.T, id string) func(obj client.Object) error {
			return func(client.Object) error {
				return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("pillarvolumestates").GroupResource(), id)
			}
		}},
		{"an older version", func(t *testing.T, id string) func(obj client.Object) error {
			old := record(t, id)
			// The record moves on without the cache seeing it.
			v := old.DeepCopy()
			v.Annotations["pillar-csi.io/test-moved"] = "true"
			if err := cluster.Admin.Update(ctx, v); err != nil {
				t.Fatal(err)
			}
			return func(obj client.Object) error {
				old.DeepCopyInto(obj.(*v1alpha1.PillarVolumeState))
				return nil
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := uniq("pvc-stale")
			if _, err := newService(t).CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
				t.Fatal(err)
			}
			cached := c.stale(t, id)
			ww, err := client.NewWithWatch(cluster.User, client.Options{Scheme: cluster.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			lagging := interceptor.NewClient(ww, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*v1alpha1.PillarVolumeState); ok && key.Name == id {
						return cached(obj)
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			pool := agentclient.NewPool(agentclient.Options{CallTimeout: 5 * time.Second})
			t.Cleanup(pool.Close)
			s := controller.New(controller.Config{Client: lagging, Reader: user, Connector: &reconcile.Connector{Client: user, Pool: pool}})
			if _, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo}); err != nil {
				t.Fatalf("publish from a lagging cache: %v", err)
			}
			v := record(t, id)
			if len(v.Spec.Publications) != 1 || v.Spec.Publications[0].NodeID != nodeA {
				t.Errorf("publications %v, want node A once", v.Spec.Publications)
			}
			if g := agent.Presented("AllowHost", id); len(g) != 1 || g[0] != uint64(v.Spec.PublicationGeneration) {
				t.Errorf("AllowHost presented generations %v, want the record's %d once", g, v.Spec.PublicationGeneration)
			}
		})
	}
}

// TestReconcileReadsTheCache: the VolumeStateReconciler, run for every
// record a burst of claims creates, decides from the informer cache that
// a record waiting for its export or already exported needs nothing, and
// reads the API server only when it acts (here a record with no export
// spec, whose condition it writes).
func TestReconcileReadsTheCache(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s, calls := countingService(t)
	r := &controller.VolumeStateReconciler{Service: s, Recorder: events.NewFakeRecorder(16)}
	exported, half := uniq("pvc-cache"), uniq("pvc-cache-half")
	if _, err := s.CreateVolume(ctx, createReq(exported, 8<<20)); err != nil {
		t.Fatal(err)
	}
	agent.FailNext("ExportVolume", status.Error(codes.Unavailable, "injected"))
	if _, err := s.CreateVolume(ctx, createReq(half, 8<<20)); status.Code(err) != codes.Unavailable {
		t.Fatalf("half a create: %v", err)
	}
	calls.take()
	reconcileOnce(t, r, exported)
	if n := calls.take(); n["get"] != 0 || n["write"] != 0 || n["cached get"] != 1 {
		t.Errorf("an exported record: %v; want one cached read and no API server read or write", n)
	}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: half}})
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.take(); n["get"] != 0 || n["write"] != 0 || n["cached get"] != 1 {
		t.Errorf("a record waiting for its export: %v; want one cached read and no API server read or write", n)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > controller.DefaultAbandonAfter {
		t.Errorf("a record waiting for its export is looked at again after %v, want when it may be abandoned (within %v)", res.RequeueAfter, controller.DefaultAbandonAfter)
	}

	legacy := uniq("pvc-cache-legacy")
	legacyRecord(t, legacy)
	calls.take()
	reconcileOnce(t, r, legacy)
	if n := calls.take(); n["get"] != 1 || n["write"] != 1 {
		t.Errorf("a record without an export spec: %v; want it read fresh once and its condition written once", n)
	}
	if c := meta.FindStatusCondition(record(t, legacy).Status.Conditions, v1alpha1.ConditionExportSpecMissing); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("condition = %+v", c)
	}
	// The operator states the legacy record's spec (the recovery patch),
	// so that it can be deleted as the others.
	v := record(t, legacy)
	v.Spec.Export = &v1alpha1.ExportSpec{BindAddress: "192.0.2.30", Port: 4421, ACLEnabled: ptr.To(true)}
	if err := cluster.Admin.Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{exported, half, legacy} {
		if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume %s: %v", id, err)
		}
		if _, ok := agent.Volumes()[id]; ok {
			t.Errorf("%s is still on the agent after DeleteVolume", id)
		}
	}
}

// TestCreateVolumeNeedsItsConnectOptions: the connect options of the
// volume's PillarProtocol go into the PersistentVolume for good, so a
// CreateVolume that cannot read the protocol fails (and is retried)
// rather than answer without them.
func TestCreateVolumeNeedsItsConnectOptions(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	id := uniq("pvc-connect")
	if _, err := newService(t).CreateVolume(ctx, createReq(id, 8<<20)); err != nil {
		t.Fatal(err)
	}
	ww, err := client.NewWithWatch(cluster.User, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	failing := interceptor.NewClient(ww, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.PillarProtocol); ok {
				return apierrors.NewServiceUnavailable("injected")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	pool := agentclient.NewPool(agentclient.Options{CallTimeout: 5 * time.Second})
	t.Cleanup(pool.Close)
	s := controller.New(controller.Config{Client: failing, Reader: user, Connector: &reconcile.Connector{Client: user, Pool: pool}})
	_, err = s.CreateVolume(ctx, createReq(id, 8<<20))
	wantCode(t, "the repeated CreateVolume with the protocol unreadable", err, codes.Unavailable, "PillarProtocol", "connect options")
	if _, err := newService(t).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}
