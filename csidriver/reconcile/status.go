package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// verdict is a reconciler's answer for the Ready condition.
type verdict struct {
	ready   bool
	reason  string
	message string
	// pending marks a state that is expected to pass by itself (the
	// object a reference names has not been reconciled yet): it is shown
	// in the condition but earns no Warning event.
	pending bool
}

func pending(reason, format string, args ...any) verdict {
	return verdict{reason: reason, message: fmt.Sprintf(format, args...), pending: true}
}

func ready(reason, format string, args ...any) verdict {
	return verdict{ready: true, reason: reason, message: fmt.Sprintf(format, args...)}
}

func notReady(reason, format string, args ...any) verdict {
	return verdict{reason: reason, message: fmt.Sprintf(format, args...)}
}

// setReady sets the Ready condition and reports whether its status or
// reason changed (a transition worth an event). The transition time is
// kept when the status stays the same, as meta.SetStatusCondition does.
func setReady(conds *[]metav1.Condition, v verdict, generation int64) (transition bool) {
	old := meta.FindStatusCondition(*conds, v1alpha1.ConditionReady)
	st := metav1.ConditionFalse
	if v.ready {
		st = metav1.ConditionTrue
	}
	transition = old == nil || old.Status != st || old.Reason != v.reason
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: st, Reason: v.reason, Message: v.message, ObservedGeneration: generation,
	})
	return transition
}

// announce records an event for a Ready transition: Normal when the object
// became (or stays, with a new reason) ready, Warning otherwise.
func announce(rec events.EventRecorder, obj runtime.Object, v verdict) {
	if rec == nil || v.pending {
		return
	}
	typ := corev1.EventTypeNormal
	if !v.ready {
		typ = corev1.EventTypeWarning
	}
	rec.Eventf(obj, nil, typ, v.reason, "Reconcile", "%s", v.message)
}

// writeStatus writes obj's status when it differs from before (a copy of
// the status taken before the reconcile changed it). Nothing is written at
// rest.
func writeStatus(ctx context.Context, c client.Client, obj client.Object, before, after any) error {
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	return c.Status().Update(ctx, obj)
}

// AcceptedSpecAnnotation records, on a Pillar* object, the values of its
// immutable fields when the controller first accepted it. API servers
// older than 1.25 do not enforce the CRDs' CEL rules, which forbid changing
// those fields; on them the controller compares the spec with this record
// and refuses to act on a forbidden change.
const AcceptedSpecAnnotation = "pillar-csi.io/accepted-spec"

// immutable is one field whose value may not change once accepted.
type immutable struct {
	path  string // as the operator sees it: spec.zfs.pool
	value string
	// onceSet fields may go from unset to set (PillarAgent's nodeName).
	onceSet bool
}

// checkImmutable compares fields with the accepted record on obj. It
// returns the forbidden changes (empty when none) and, when the record is
// missing or may grow (a once-set field was set), the annotation value to
// record; "" means the record is current.
func checkImmutable(obj client.Object, fields []immutable) (violations []string, record string) {
	cur := map[string]string{}
	for _, f := range fields {
		cur[f.path] = f.value
	}
	raw, ok := obj.GetAnnotations()[AcceptedSpecAnnotation]
	accepted := map[string]string{}
	if ok && json.Unmarshal([]byte(raw), &accepted) != nil {
		// A damaged record (someone edited it) is rebuilt from the spec:
		// the CEL rules, where enforced, still hold.
		ok, accepted = false, map[string]string{}
	}
	grow := !ok
	for _, f := range fields {
		was, seen := accepted[f.path]
		switch {
		case !seen:
			grow = true
		case was == f.value:
		case f.onceSet && was == "":
			grow = true
		default:
			violations = append(violations, fmt.Sprintf("%s was %q and is now %q", f.path, was, f.value))
		}
	}
	if len(violations) > 0 || !grow {
		return violations, ""
	}
	for k, v := range accepted {
		if _, ok := cur[k]; !ok {
			cur[k] = v
		}
	}
	b, _ := json.Marshal(cur) // map[string]string always marshals
	return nil, string(b)
}

// recordAccepted patches the accepted-spec annotation onto obj.
func recordAccepted(ctx context.Context, c client.Client, obj client.Object, record string) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{AcceptedSpecAnnotation: record}}}
	b, _ := json.Marshal(patch)
	return c.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", b))
}

// refuseChange is the verdict for forbidden changes.
func refuseChange(kind string, violations []string) verdict {
	return notReady(v1alpha1.ReasonImmutableFieldChanged,
		"%s; these fields cannot change (this API server does not enforce the CRD's validation rules, so the controller does): "+
			"change them back, or create a new %s; until then the controller does not act on this object", strings.Join(violations, "; "), kind)
}

// sortedUnique sorts names and drops repeats.
func sortedUnique(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}

// conflictRetry is how soon a reconcile that lost a race (an update
// against a stale cache, a create that met an object made meanwhile) runs
// again.
const conflictRetry = 200 * time.Millisecond

// result turns a reconcile's error into its result: a lost race is retried
// soon, quietly (it is the normal effect of a cache a moment behind the
// API server), an object deleted meanwhile is let go; any other error goes to controller-runtime, which logs it
// and retries with backoff.
func result(err error) (ctrl.Result, error) {
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	case apierrors.IsNotFound(err):
		// Deleted while it was being reconciled: the delete's own event
		// reconciles it once more.
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}
