package reconcile

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
)

// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarstores,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarstores/status,verbs=get;update;patch

// StoreReconciler keeps a PillarStore's capacity and Ready condition true
// to what its agent reports, refreshing every Refresh and whenever its
// agent changes.
type StoreReconciler struct {
	Client client.Client
	// Reader reads PillarVolumeStates from the API server (the manager's
	// APIReader), for the deletion of a store that volumes use.
	Reader    client.Reader
	Connector *Connector
	Recorder  events.EventRecorder
	Metrics   *Metrics
	Refresh   time.Duration
}

// Reconcile implements reconcile.Reconciler.
func (r *StoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s v1alpha1.PillarStore
	if err := r.Client.Get(ctx, req.NamespacedName, &s); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forgetStore(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !s.DeletionTimestamp.IsZero() {
		return r.deleting(ctx, &s)
	}
	if err := ensureInUseFinalizer(ctx, r.Client, &s); err != nil {
		return result(err)
	}
	before := s.Status.DeepCopy()
	v := r.observe(ctx, &s)
	transition := setReady(&s.Status.Conditions, v, s.Generation)
	s.Status.ObservedGeneration = s.Generation
	if err := writeStatus(ctx, r.Client, &s, before, &s.Status); err != nil {
		return result(err)
	}
	if transition {
		announce(r.Recorder, &s, v)
	}
	return ctrl.Result{RequeueAfter: r.Refresh}, nil
}

// deleting lets a store go once no volume lives on it; until then it
// says, in its Ready condition and an event, which volumes it waits for.
func (r *StoreReconciler) deleting(ctx context.Context, s *v1alpha1.PillarStore) (ctrl.Result, error) {
	vols, err := volumesOn(ctx, r.Reader, s.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(vols) == 0 {
		r.Metrics.forgetStore(s.Name)
		return releaseInUse(ctx, r.Client, s)
	}
	before := s.Status.DeepCopy()
	v := waitsFor("store", vols)
	transition := setReady(&s.Status.Conditions, v, s.Generation)
	if err := writeStatus(ctx, r.Client, s, before, &s.Status); err != nil {
		return result(err)
	}
	if transition {
		announce(r.Recorder, s, v)
	}
	return ctrl.Result{RequeueAfter: inUseRecheck}, nil
}

// storeImmutables are the fields the CRD's CEL rules freeze.
func storeImmutables(s *v1alpha1.PillarStore) []immutable {
	f := []immutable{{path: "spec.agentName", value: string(s.Spec.AgentName)}, {path: "spec.type", value: string(s.Spec.Type)}}
	if z := s.Spec.ZFS; z != nil {
		f = append(f, immutable{path: "spec.zfs.pool", value: z.Pool}, immutable{path: "spec.zfs.parentDataset", value: z.ParentDataset})
	}
	if l := s.Spec.LVM; l != nil {
		f = append(f, immutable{path: "spec.lvm.volumeGroup", value: l.VolumeGroup}, immutable{path: "spec.lvm.thinPool", value: l.ThinPool})
	}
	return f
}

func (r *StoreReconciler) observe(ctx context.Context, s *v1alpha1.PillarStore) verdict {
	st := agentclient.StoreFor(s)
	if st == nil {
		return notReady(v1alpha1.ReasonInvalidSpec, "spec.type is %q but spec.%s is not set: set exactly the section of the type", s.Spec.Type, map[v1alpha1.BackendType]string{v1alpha1.BackendZFS: "zfs", v1alpha1.BackendLVM: "lvm"}[s.Spec.Type])
	}
	if s.Spec.ZFS != nil && s.Spec.LVM != nil {
		return notReady(v1alpha1.ReasonInvalidSpec, "both spec.zfs and spec.lvm are set: keep only the section of spec.type %q", s.Spec.Type)
	}
	if viol, rec := checkImmutable(s, storeImmutables(s)); len(viol) > 0 {
		return refuseChange("PillarStore", viol)
	} else if rec != "" {
		if err := recordAccepted(ctx, r.Client, s, rec); err != nil {
			return notReady(v1alpha1.ReasonUpdateFailed, "cannot record the accepted spec: %v", err)
		}
	}
	var a v1alpha1.PillarAgent
	if err := r.Client.Get(ctx, types.NamespacedName{Name: string(s.Spec.AgentName)}, &a); err != nil {
		if apierrors.IsNotFound(err) {
			return notReady(v1alpha1.ReasonAgentNotFound, "PillarAgent %q does not exist: create it, or correct spec.agentName", s.Spec.AgentName)
		}
		return notReady(v1alpha1.ReasonAgentNotFound, "cannot read PillarAgent %q: %v", s.Spec.AgentName, err)
	}
	switch c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady); {
	case c == nil:
		// The agent's reconcile is on its way; its status change wakes
		// this store.
		return pending(v1alpha1.ReasonAgentNotReady, "PillarAgent %q has not been reached yet", a.Name)
	case c.Status != metav1.ConditionTrue:
		return notReady(v1alpha1.ReasonAgentNotReady, "PillarAgent %q is not ready (%s: %s)", a.Name, c.Reason, c.Message)
	}
	conn, err := r.Connector.Connect(ctx, &a)
	if err != nil {
		return notReady(v1alpha1.ReasonAgentNotReady, "PillarAgent %q: %v", a.Name, err)
	}
	resp, err := conn.Agent.GetCapacity(ctx, &agentv1.GetCapacityRequest{Store: st})
	if err != nil {
		msg := status.Convert(err).Message()
		if ref, ok := agentv1.StoreRefusalOf(err); ok && ref.GetReason() == agentv1.StoreRefusal_REASON_THIN_POOL_NOT_ZEROING && s.Spec.LVM != nil {
			return notReady(v1alpha1.ReasonThinPoolNotZeroing, "the agent on %q reports: %s; run `lvchange --zero y %s/%s` on the storage node, "+
				"or set spec.lvm.allowUnzeroedThinPool to true if every user of the store may read data that deleted volumes left behind",
				a.Name, msg, s.Spec.LVM.VolumeGroup, s.Spec.LVM.ThinPool)
		}
		switch status.Code(err) {
		case codes.FailedPrecondition, codes.NotFound:
			return notReady(v1alpha1.ReasonPoolMissing, "the agent on %q reports: %s; create the %s on the storage node or correct the PillarStore", a.Name, msg, poolWord(s))
		case codes.Unimplemented:
			return notReady(v1alpha1.ReasonBackendToolsMissing, "the agent on %q reports: %s; install the %s tools and kernel module on the storage node", a.Name, msg, s.Spec.Type)
		case codes.InvalidArgument:
			return notReady(v1alpha1.ReasonInvalidSpec, "the agent refuses the store configuration: %s", msg)
		case codes.Unavailable, codes.DeadlineExceeded:
			return notReady(v1alpha1.ReasonAgentNotReady, "PillarAgent %q did not answer: %s", a.Name, msg)
		}
		return notReady(v1alpha1.ReasonCapacityFailed, "the agent on %q could not report the capacity: %s: %s", a.Name, status.Code(err), msg)
	}
	s.Status.Capacity = &v1alpha1.StoreCapacity{TotalBytes: resp.GetTotalBytes(), AvailableBytes: resp.GetAvailableBytes()}
	r.Metrics.setStore(s.Name, resp.GetTotalBytes(), resp.GetAvailableBytes())
	return ready(v1alpha1.ReasonStoreAvailable, "%s of %s available on %s", bytesString(resp.GetAvailableBytes()), bytesString(resp.GetTotalBytes()), poolName(s))
}

func poolWord(s *v1alpha1.PillarStore) string {
	if s.Spec.Type == v1alpha1.BackendZFS {
		return "zpool"
	}
	if s.Spec.LVM != nil && s.Spec.LVM.ThinPool != "" {
		return "volume group and thin pool"
	}
	return "volume group"
}

func poolName(s *v1alpha1.PillarStore) string {
	if z := s.Spec.ZFS; z != nil {
		if z.ParentDataset != "" {
			return "zfs " + z.Pool + "/" + z.ParentDataset
		}
		return "zfs " + z.Pool
	}
	if l := s.Spec.LVM; l != nil && l.ThinPool != "" {
		return "lvm " + l.VolumeGroup + "/" + l.ThinPool
	}
	return "lvm " + s.Spec.LVM.VolumeGroup
}

// bytesString is a size for people: 1.5 GiB.
func bytesString(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 5; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
