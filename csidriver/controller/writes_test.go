package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
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
// CreateVolume to a published volume: the record itself, its status once
// the volume is exported (one token for the create and the export), and
// the publication's compare-and-swap, which issues the publication's
// token. docs/architecture.md, "One token per CSI call", says why no
// other write is needed.
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
	if n := calls.take(); n["write"] != 1 || n["get"] != 1 {
		t.Errorf("ControllerPublishVolume: %d writes and %d API server reads of the record, want 1 and 1 (%v)", n["write"], n["get"], n)
	}
	if v := record(t, id); v.Spec.PublicationGeneration != 2 || len(v.Spec.Publications) != 1 {
		t.Errorf("after the publication: generation %d, publications %v; want 2 and node A", v.Spec.PublicationGeneration, v.Spec.Publications)
	}
}
