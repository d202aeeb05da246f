package reconcile

import (
	"context"
	"net/netip"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// Field indexes the reconcilers look up by.
const (
	indexStore    = "spec.storeName"
	indexProtocol = "spec.protocolName"
	indexAgent    = "spec.agentName"
	indexSecret   = "spec.tls.secretRef"
)

// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarprotocols,verbs=get;list;watch
// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarprotocols/status,verbs=get;update;patch

// ProtocolReconciler validates a PillarProtocol beyond what the CRD schema
// can say (and what an API server without CEL does not check) and lists the
// PillarStorageClasses that use it.
//
// The agent API cannot yet tell which addresses a storage node can bind,
// so a bindAddress the node does not have is reported only when an export
// fails.
type ProtocolReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// Reconcile implements reconcile.Reconciler.
func (r *ProtocolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p v1alpha1.PillarProtocol
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := p.Status.DeepCopy()
	var classes v1alpha1.PillarStorageClassList
	if err := r.Client.List(ctx, &classes, client.MatchingFields{indexProtocol: p.Name}); err != nil {
		return ctrl.Result{}, err
	}
	names := []string{}
	for _, c := range classes.Items {
		names = append(names, c.Name)
	}
	p.Status.StorageClasses = sortedUnique(names)
	if len(p.Status.StorageClasses) == 0 {
		p.Status.StorageClasses = nil
	}
	v := validateProtocol(&p)
	transition := setReady(&p.Status.Conditions, v, p.Generation)
	p.Status.ObservedGeneration = p.Generation
	if err := writeStatus(ctx, r.Client, &p, before, &p.Status); err != nil {
		return result(err)
	}
	if transition {
		announce(r.Recorder, &p, v)
	}
	return ctrl.Result{}, nil
}

// validateProtocol checks what the CRD's CEL rules check (for API servers
// that do not) and what no schema can: that the address parses as the
// kernel's nvmet will need it.
func validateProtocol(p *v1alpha1.PillarProtocol) verdict {
	if p.Spec.Type != v1alpha1.ProtocolNVMeOFTCP {
		return notReady(v1alpha1.ReasonInvalidSpec, "spec.type %q is not supported: the only protocol is NVMeOFTCP", p.Spec.Type)
	}
	t := p.Spec.NVMeOFTCP
	if t == nil {
		return notReady(v1alpha1.ReasonInvalidSpec, "spec.nvmeofTCP is required when spec.type is NVMeOFTCP")
	}
	addr, err := netip.ParseAddr(string(t.BindAddress))
	if err != nil || addr.Zone() != "" {
		return notReady(v1alpha1.ReasonInvalidSpec, "spec.nvmeofTCP.bindAddress %q is not an IPv4 or IPv6 address without a zone", t.BindAddress)
	}
	if t.Port < 0 || t.Port > 65535 {
		return notReady(v1alpha1.ReasonInvalidSpec, "spec.nvmeofTCP.port %d is not a TCP port", t.Port)
	}
	port := t.Port
	if port == 0 {
		port = v1alpha1.DefaultNVMeOFTCPPort
	}
	acl := t.ACLEnabled == nil || *t.ACLEnabled
	return ready(v1alpha1.ReasonProtocolAccepted, "NVMe-oF/TCP on %s port %d, host ACLs %s", addr, port, map[bool]string{true: "on", false: "off (any host that reaches the port may connect)"}[acl])
}
