package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillaragents,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillaragents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=pillar-csi,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// AgentReconciler keeps a PillarAgent's status true to what its agent
// answers: endpoint, version, instance and boot IDs, and Ready.
type AgentReconciler struct {
	Client client.Client
	// Reader reads PillarVolumeStates from the API server (the manager's
	// APIReader), for the deletion of an agent that volumes use.
	Reader    client.Reader
	Connector *Connector
	Recorder  events.EventRecorder
	Metrics   *Metrics
	// OnRestart is called with the agent's name when a new agent instance
	// is seen (an agent restart, a storage-node reboot, or the first
	// contact after the controller started): the exports the agent had
	// may be gone, so the desired exports of its volumes must be pushed
	// back. May be nil.
	OnRestart func(agent string)
	// Refresh is how often a Ready agent is asked again for its version
	// and capabilities; the health watch reports losses in between.
	Refresh time.Duration
	// Now is the clock of lastRestartTime; time.Now if nil.
	Now func() time.Time

	backoff backoff
	drift   restoredCounts
}

// restoredCounts remembers, per agent, the last exports_restored its
// instance reported, so each increase is announced once.
type restoredCounts struct {
	mu   sync.Mutex
	seen map[string]restoredCount
}

type restoredCount struct {
	instance string
	n        uint64
}

// increase records n for the agent's instance and returns by how much it
// grew since the last report of the same instance (all of n for an
// instance not seen before).
func (c *restoredCounts) increase(agent, instance string, n uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]restoredCount{}
	}
	last := c.seen[agent]
	c.seen[agent] = restoredCount{instance: instance, n: n}
	if last.instance != instance || n < last.n {
		return n
	}
	return n - last.n
}

func (c *restoredCounts) forget(agent string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, agent)
}

// Reconcile implements reconcile.Reconciler.
func (r *AgentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var a v1alpha1.PillarAgent
	if err := r.Client.Get(ctx, req.NamespacedName, &a); err != nil {
		if apierrors.IsNotFound(err) {
			r.Connector.Pool.Forget(req.Name)
			r.backoff.forget(req.Name)
			r.drift.forget(req.Name)
			r.Metrics.forgetAgent(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !a.DeletionTimestamp.IsZero() {
		return r.deleting(ctx, &a)
	}
	if err := ensureInUseFinalizer(ctx, r.Client, &a); err != nil {
		return result(err)
	}
	before := a.Status.DeepCopy()
	v, info := r.observe(ctx, &a)
	var restart func()
	if info != nil {
		restart = r.noteInstance(&a, info)
	}
	transition := setReady(&a.Status.Conditions, v, a.Generation)
	a.Status.ObservedGeneration = a.Generation
	// A status write that fails (a stale cache, a conflict) is retried
	// from a fresh read; the restart is announced once, after the write
	// that recorded the new instance.
	if err := writeStatus(ctx, r.Client, &a, before, &a.Status); err != nil {
		return result(err)
	}
	if restart != nil {
		restart()
	}
	if info != nil && r.Recorder != nil {
		if n := r.drift.increase(a.Name, info.GetInstanceId(), info.GetExportsRestored()); n > 0 {
			r.Recorder.Eventf(&a, nil, corev1.EventTypeWarning, v1alpha1.ReasonExportsRestored, "Reconcile",
				"pillar-agent put back %d export(s) that something else on the storage node removed from nvmet (nvmetcli clear, another tool?): "+
					"find what manages nvmet there; pillar_agent_exports_restored_total counts them", n)
		}
	}
	if transition {
		announce(r.Recorder, &a, v)
	}
	r.Metrics.setAgentReady(a.Name, v.ready)
	if v.ready {
		r.backoff.forget(a.Name)
		return ctrl.Result{RequeueAfter: r.Refresh}, nil
	}
	return ctrl.Result{RequeueAfter: r.backoff.next(a.Name)}, nil
}

// pinMarksStore records the identity of the agent's fencing marks store
// the first time it is seen, and refuses (ok false, with the verdict) an
// agent that reports another one, unless the PillarAgent's
// AnnotationAcceptMarksStore names it. An agent that reports none (older
// than the field) is not judged.
func (r *AgentReconciler) pinMarksStore(a *v1alpha1.PillarAgent, got string) (verdict, bool) {
	pinned := a.Status.MarksStoreID
	switch {
	case got == "" || got == pinned:
		return verdict{}, true
	case pinned == "":
		a.Status.MarksStoreID = got
		return verdict{}, true
	case a.Annotations[v1alpha1.AnnotationAcceptMarksStore] == got:
		a.Status.MarksStoreID = got
		if r.Recorder != nil {
			r.Recorder.Eventf(a, nil, corev1.EventTypeWarning, v1alpha1.ReasonMarksStoreAccepted, "Reconcile",
				"the fencing marks store %s replaces %s, as the annotation %s says", got, pinned, v1alpha1.AnnotationAcceptMarksStore)
		}
		return verdict{}, true
	}
	return notReady(v1alpha1.ReasonMarksStoreChanged, "the agent's fencing marks store is %s, not %s, which the controller pinned: its marks were lost "+
		"(a wiped or replaced generations directory, a disk that was not mounted), and with them what it knew of deleted volumes. "+
		"No call goes to this agent until an operator recovers: mount the old directory back and restart the agent, or follow "+
		"docs/troubleshooting.md (MarksStoreChanged), then: kubectl annotate pillaragent %s %s=%s",
		got, pinned, a.Name, v1alpha1.AnnotationAcceptMarksStore, got), false
}

// deleting lets an agent go once no volume lives on a store of its node;
// until then it keeps serving them, and says which volumes it waits for.
func (r *AgentReconciler) deleting(ctx context.Context, a *v1alpha1.PillarAgent) (ctrl.Result, error) {
	var stores v1alpha1.PillarStoreList
	if err := r.Client.List(ctx, &stores, client.MatchingFields{indexAgent: a.Name}); err != nil {
		return ctrl.Result{}, err
	}
	var names []string
	for _, s := range stores.Items {
		names = append(names, s.Name)
	}
	vols, err := volumesOn(ctx, r.Reader, names...)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(vols) == 0 {
		r.Connector.Pool.Forget(a.Name)
		return releaseInUse(ctx, r.Client, a)
	}
	before := a.Status.DeepCopy()
	v := waitsFor("agent's stores", vols)
	transition := setReady(&a.Status.Conditions, v, a.Generation)
	if err := writeStatus(ctx, r.Client, a, before, &a.Status); err != nil {
		return result(err)
	}
	if transition {
		announce(r.Recorder, a, v)
	}
	return ctrl.Result{RequeueAfter: inUseRecheck}, nil
}

// observe asks the agent for its info and judges the answer.
func (r *AgentReconciler) observe(ctx context.Context, a *v1alpha1.PillarAgent) (verdict, *agentv1.GetAgentInfoResponse) {
	if a.Spec.NodeName == "" && a.Spec.Address == "" {
		return notReady(v1alpha1.ReasonInvalidSpec, "set spec.nodeName, spec.address or both: the controller needs one of them to reach the agent"), nil
	}
	if viol, rec := checkImmutable(a, []immutable{{path: "spec.nodeName", value: string(a.Spec.NodeName), onceSet: true}}); len(viol) > 0 {
		return refuseChange("PillarAgent", viol), nil
	} else if rec != "" {
		if err := recordAccepted(ctx, r.Client, a, rec); err != nil {
			return notReady(v1alpha1.ReasonUpdateFailed, "cannot record the accepted spec: %v", err), nil
		}
	}
	conn, err := r.Connector.Connect(ctx, a)
	if err != nil {
		var ce *ConnectError
		if errors.As(err, &ce) {
			return notReady(ce.Reason, "%s", ce.Message), nil
		}
		return notReady(v1alpha1.ReasonUnreachable, "%v", err), nil
	}
	a.Status.Endpoint = conn.Endpoint()
	info, err := conn.Agent.GetAgentInfo(ctx, &agentv1.GetAgentInfoRequest{})
	if err != nil {
		reason := callReason(err)
		if status.Code(err) == codes.Unauthenticated {
			return notReady(v1alpha1.ReasonUnauthenticated, "the agent at %s refuses the controller's agent token: %v; pillar-controller's -agent-token-file "+
				"must hold a token of the agent's -token-dir (with the chart both mount the Secret of agent.auth.existingSecret, or <release>-agent-token); "+
				"a rotated Secret takes up to a minute to reach both", conn.Endpoint(), status.Convert(err).Message()), nil
		}
		if reason == v1alpha1.ReasonTLSFailed {
			return notReady(reason, "TLS handshake with the agent at %s failed: %v; check that the agent's certificate is signed by ca.crt of %s and carries the name %q, and that the agent trusts the CA of tls.crt",
				conn.Endpoint(), err, tlsSecret(a), serverName(a, conn.Endpoint())), nil
		}
		return notReady(reason, "the agent at %s does not answer: %v; check that pillar-agent runs on the node and that the address and port are right", conn.Endpoint(), err), nil
	}
	a.Status.AgentVersion = info.GetAgentVersion()
	if a.Spec.NodeName != "" && info.GetNodeName() != "" && info.GetNodeName() != string(a.Spec.NodeName) {
		// Not this object's agent: its instance is not recorded, so no
		// export is ever pushed to it on this object's behalf.
		return notReady(v1alpha1.ReasonNodeMismatch, "the agent at %s runs on node %q, not on spec.nodeName %q: correct spec.address or spec.nodeName",
			conn.Endpoint(), info.GetNodeName(), a.Spec.NodeName), nil
	}
	if v, ok := r.pinMarksStore(a, info.GetMarksStoreId()); !ok {
		// Not recorded either: nothing is pushed to a store that lost
		// its marks until an operator accepts it.
		return v, nil
	}
	if h := conn.Health(); h.Known && h.Err == nil && !h.Serving {
		return notReady(v1alpha1.ReasonNotServing, "the agent at %s answers but reports NOT_SERVING (not ready): see `kubectl logs` of pillar-agent on the node, or its /readyz", conn.Endpoint()), info
	}
	if !slices.Contains(info.GetCapabilities(), agentv1.Capability_CAPABILITY_TRANSPORT_NVMEOF_TCP) {
		return notReady(v1alpha1.ReasonNvmetMissing, "the agent on node %q cannot export over NVMe-oF/TCP: load the kernel modules nvmet and nvmet_tcp and mount configfs on the storage node", info.GetNodeName()), info
	}
	return ready(v1alpha1.ReasonAgentReady, "agent %s on node %q answers at %s", info.GetAgentVersion(), info.GetNodeName(), conn.Endpoint()), info
}

// noteInstance records the agent's instance and boot IDs in the status.
// For a new instance it returns what announces it (events, metric,
// OnRestart), to run once the status is written; nil otherwise.
func (r *AgentReconciler) noteInstance(a *v1alpha1.PillarAgent, info *agentv1.GetAgentInfoResponse) func() {
	id, boot := info.GetInstanceId(), info.GetBootId()
	if id == "" {
		// An agent older than the field: the boot ID (if any) stands in.
		id = boot
	}
	if id == "" || id == a.Status.InstanceID {
		return nil
	}
	first := a.Status.InstanceID == ""
	rebooted := a.Status.BootID != "" && boot != "" && boot != a.Status.BootID
	a.Status.InstanceID, a.Status.BootID = id, boot
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	t := metav1.NewTime(now())
	a.Status.LastRestartTime = &t
	node := info.GetNodeName()
	return func() {
		if !first && r.Recorder != nil {
			if rebooted {
				r.Recorder.Eventf(a, nil, corev1.EventTypeWarning, v1alpha1.ReasonNodeRebooted, "Reconcile",
					"storage node %q rebooted (boot ID %s); pushing the desired exports back", node, boot)
			} else {
				r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, v1alpha1.ReasonAgentRestarted, "Reconcile",
					"pillar-agent restarted (instance %s); pushing the desired exports back", id)
			}
		}
		r.Metrics.countRestart(a.Name, first)
		if r.OnRestart != nil {
			r.OnRestart(a.Name)
		}
	}
}

func serverName(a *v1alpha1.PillarAgent, endpoint string) string {
	if a.Spec.TLS != nil && a.Spec.TLS.ServerName != "" {
		return a.Spec.TLS.ServerName
	}
	return hostOf(endpoint)
}

// tlsSecret names the agent's TLS Secret for messages.
func tlsSecret(a *v1alpha1.PillarAgent) string {
	if a.Spec.TLS == nil {
		return "no Secret (spec.tls is not set: the controller speaks plaintext)"
	}
	return fmt.Sprintf("Secret %s/%s", a.Spec.TLS.SecretRef.Namespace, a.Spec.TLS.SecretRef.Name)
}

// backoff spaces the retries of an object that is not ready: 1 s, 2 s, 4 s
// ... up to 5 minutes; the health watch cuts the wait short when an agent
// comes back.
type backoff struct {
	mu sync.Mutex
	n  map[string]int
}

func (b *backoff) next(name string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == nil {
		b.n = map[string]int{}
	}
	n := min(b.n[name]+1, 10)
	b.n[name] = n
	return min(time.Second<<(n-1), 5*time.Minute)
}

func (b *backoff) forget(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.n, name)
}
