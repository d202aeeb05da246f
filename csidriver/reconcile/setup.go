package reconcile

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
)

// Defaults of Options.
const (
	DefaultAgentRefresh = 5 * time.Minute
	DefaultStoreRefresh = time.Minute
)

// Options configure the configuration reconcilers.
type Options struct {
	// AgentRefresh is how often a Ready agent is asked again for its info;
	// DefaultAgentRefresh if zero.
	AgentRefresh time.Duration
	// StoreRefresh is how often a store's capacity is read again;
	// DefaultStoreRefresh if zero.
	StoreRefresh time.Duration
	// OnAgentRestart is called with an agent's name when a new agent
	// instance is seen (see AgentReconciler.OnRestart).
	OnAgentRestart func(agent string)
	// Pool options; Notify is set by Setup.
	Pool agentclient.Options
	// Metrics may be nil.
	Metrics *Metrics
	// SecretNamespaces are where agents' TLS Secrets may be (see
	// Connector.SecretNamespaces); empty: Secrets are neither read nor
	// watched.
	SecretNamespaces []string
}

// Controllers are the configuration reconcilers, set up on a manager.
type Controllers struct {
	// Connector reaches agents; part of the CSI Controller service too.
	Connector *Connector
	// StoreChanged asks for a store's capacity to be read again (after a
	// volume was created, expanded or deleted); the changes of a second
	// share one refresh.
	StoreChanged func(store string)
}

// Setup registers the four reconcilers, their indexes and watches with mgr.
// The agent connections are closed when mgr stops.
func Setup(mgr manager.Manager, opts Options) (*Controllers, error) {
	if opts.AgentRefresh <= 0 {
		opts.AgentRefresh = DefaultAgentRefresh
	}
	if opts.StoreRefresh <= 0 {
		opts.StoreRefresh = DefaultStoreRefresh
	}
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	for _, ix := range []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&v1alpha1.PillarStorageClass{}, indexStore, func(o client.Object) []string {
			return []string{string(o.(*v1alpha1.PillarStorageClass).Spec.StoreName)}
		}},
		{&v1alpha1.PillarStorageClass{}, indexProtocol, func(o client.Object) []string {
			return []string{string(o.(*v1alpha1.PillarStorageClass).Spec.ProtocolName)}
		}},
		{&v1alpha1.PillarStore{}, indexAgent, func(o client.Object) []string {
			return []string{string(o.(*v1alpha1.PillarStore).Spec.AgentName)}
		}},
		{&v1alpha1.PillarAgent{}, indexSecret, func(o client.Object) []string {
			if t := o.(*v1alpha1.PillarAgent).Spec.TLS; t != nil {
				return []string{string(t.SecretRef.Namespace) + "/" + string(t.SecretRef.Name)}
			}
			return nil
		}},
	} {
		if err := idx.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return nil, err
		}
	}

	// Signals from outside the API server: an agent's health changed, a
	// store's space changed. A send never blocks (a full channel means a
	// reconcile of that kind is pending anyway, and every object is also
	// refreshed on its interval).
	agentEvents := make(chan event.TypedGenericEvent[*v1alpha1.PillarAgent], 1024)
	storeEvents := make(chan event.TypedGenericEvent[*v1alpha1.PillarStore], 1024)
	poolOpts := opts.Pool
	poolOpts.Notify = func(name string) {
		select {
		case agentEvents <- event.TypedGenericEvent[*v1alpha1.PillarAgent]{Object: &v1alpha1.PillarAgent{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
		default:
		}
	}
	pool := agentclient.NewPool(poolOpts)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		pool.Close()
		return nil
	})); err != nil {
		return nil, err
	}
	conn := &Connector{Client: mgr.GetClient(), Pool: pool, SecretNamespaces: opts.SecretNamespaces}
	c := mgr.GetClient()

	ar := &AgentReconciler{Client: c, Reader: mgr.GetAPIReader(), Connector: conn, Recorder: mgr.GetEventRecorder("pillar-controller"),
		Metrics: opts.Metrics, OnRestart: opts.OnAgentRestart, Refresh: opts.AgentRefresh}
	agents := ctrl.NewControllerManagedBy(mgr).
		Named("pillaragent").
		// An annotation may accept a new marks store (pinMarksStore).
		For(&v1alpha1.PillarAgent{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(agentsOfNode(c)),
			builder.WithPredicates(nodeAddressChanged()))
	if len(opts.SecretNamespaces) > 0 {
		// Without a namespace the controller may read no Secret, and a
		// watch would only fail.
		agents = agents.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(agentsOfSecret(c)))
	}
	err := agents.
		WatchesRawSource(source.Channel(agentEvents, &handler.TypedEnqueueRequestForObject[*v1alpha1.PillarAgent]{})).
		// A deletion that waits for volumes looks again when one goes.
		Watches(&v1alpha1.PillarVolumeState{}, handler.EnqueueRequestsFromMapFunc(agentOfVolume(c)),
			builder.WithPredicates(deleteOnly())).
		Complete(ar)
	if err != nil {
		return nil, err
	}

	sr := &StoreReconciler{Client: c, Reader: mgr.GetAPIReader(), Connector: conn, Recorder: mgr.GetEventRecorder("pillar-controller"),
		Metrics: opts.Metrics, Refresh: opts.StoreRefresh}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("pillarstore").
		For(&v1alpha1.PillarStore{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.PillarAgent{}, handler.EnqueueRequestsFromMapFunc(byIndex(c, &v1alpha1.PillarStoreList{}, indexAgent)),
			builder.WithPredicates(statusOrSpecChanged())).
		WatchesRawSource(source.Channel(storeEvents, &handler.TypedEnqueueRequestForObject[*v1alpha1.PillarStore]{})).
		Watches(&v1alpha1.PillarVolumeState{}, handler.EnqueueRequestsFromMapFunc(deletingStoreOfVolume(c)),
			builder.WithPredicates(deleteOnly())).
		Complete(sr)
	if err != nil {
		return nil, err
	}

	pr := &ProtocolReconciler{Client: c, Recorder: mgr.GetEventRecorder("pillar-controller")}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("pillarprotocol").
		For(&v1alpha1.PillarProtocol{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.PillarStorageClass{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: string(o.(*v1alpha1.PillarStorageClass).Spec.ProtocolName)}}}
		}), builder.WithPredicates(createOrDelete())).
		Complete(pr)
	if err != nil {
		return nil, err
	}

	scr := &StorageClassReconciler{Client: c, Recorder: mgr.GetEventRecorder("pillar-controller")}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("pillarstorageclass").
		For(&v1alpha1.PillarStorageClass{}).
		Owns(&storagev1.StorageClass{}).
		// A StorageClass someone else created or deleted under the same
		// name is not owned: look it up by name.
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
		}), builder.WithPredicates(createOrDelete())).
		Watches(&v1alpha1.PillarStore{}, handler.EnqueueRequestsFromMapFunc(byIndex(c, &v1alpha1.PillarStorageClassList{}, indexStore)),
			builder.WithPredicates(statusOrSpecChanged())).
		Watches(&v1alpha1.PillarProtocol{}, handler.EnqueueRequestsFromMapFunc(byIndex(c, &v1alpha1.PillarStorageClassList{}, indexProtocol)),
			builder.WithPredicates(statusOrSpecChanged())).
		Complete(scr)
	if err != nil {
		return nil, err
	}
	storeChanged := newCoalescer(storeChangedSettle, func(store string) {
		select {
		case storeEvents <- event.TypedGenericEvent[*v1alpha1.PillarStore]{Object: &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: store}}}:
		default:
		}
	})
	return &Controllers{Connector: conn, StoreChanged: storeChanged.note}, nil
}

// byIndex maps an object to the objects of list whose field index holds
// its name.
func byIndex(c client.Client, list client.ObjectList, field string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, l, client.MatchingFields{field: o.GetName()}); err != nil {
			return nil
		}
		return requestsOf(l)
	}
}

func requestsOf(l client.ObjectList) []reconcile.Request {
	var out []reconcile.Request
	_ = meta.EachListItem(l, func(o runtime.Object) error {
		if m, err := meta.Accessor(o); err == nil {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: m.GetName()}})
		}
		return nil
	})
	return out
}

// readyOf is an object's Ready condition as status/reason/message.
func readyOf(o client.Object) string {
	var conds []metav1.Condition
	switch o := o.(type) {
	case *v1alpha1.PillarAgent:
		conds = o.Status.Conditions
	case *v1alpha1.PillarStore:
		conds = o.Status.Conditions
	case *v1alpha1.PillarProtocol:
		conds = o.Status.Conditions
	case *v1alpha1.PillarStorageClass:
		conds = o.Status.Conditions
	}
	c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason + "/" + c.Message
}

func agentsOfNode(c client.Client) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var l v1alpha1.PillarAgentList
		if err := c.List(ctx, &l); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, a := range l.Items {
			if string(a.Spec.NodeName) == o.GetName() && a.Spec.Address == "" {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: a.Name}})
			}
		}
		return out
	}
}

func agentsOfSecret(c client.Client) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var l v1alpha1.PillarAgentList
		if err := c.List(ctx, &l, client.MatchingFields{indexSecret: o.GetNamespace() + "/" + o.GetName()}); err != nil {
			return nil
		}
		return requestsOf(&l)
	}
}

// nodeAddressChanged passes Node events that can change an agent's
// address: kubelet updates a Node's status every few seconds, and those
// heartbeats must not reach the agents.
func nodeAddressChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
			return internalIP(o) != internalIP(n)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// statusOrSpecChanged passes updates that change what a dependent object
// reports: the spec or the Ready condition (not the resourceVersion alone).
func statusOrSpecChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				return true
			}
			return readyOf(e.ObjectOld) != readyOf(e.ObjectNew)
		},
	}
}

func createOrDelete() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
}

// deletingStoreOfVolume maps a volume to its store, if the store is being
// deleted (it waits for its volumes); a live store needs no reconcile.
func deletingStoreOfVolume(c client.Client) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var s v1alpha1.PillarStore
		if err := c.Get(ctx, types.NamespacedName{Name: string(o.(*v1alpha1.PillarVolumeState).Spec.StoreName)}, &s); err != nil || s.DeletionTimestamp.IsZero() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: s.Name}}}
	}
}

// agentOfVolume maps a volume to the agent of its store, if the agent is
// being deleted.
func agentOfVolume(c client.Client) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var s v1alpha1.PillarStore
		if err := c.Get(ctx, types.NamespacedName{Name: string(o.(*v1alpha1.PillarVolumeState).Spec.StoreName)}, &s); err != nil {
			return nil
		}
		var a v1alpha1.PillarAgent
		if err := c.Get(ctx, types.NamespacedName{Name: string(s.Spec.AgentName)}, &a); err != nil || a.DeletionTimestamp.IsZero() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: a.Name}}}
	}
}

// deleteOnly passes delete events only.
func deleteOnly() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
	}
}
