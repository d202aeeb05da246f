package chart

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestDryRunApply server-side applies every object each case of the matrix
// renders, with dryRun=All and strict field validation, against a real
// kube-apiserver that has the chart's CRDs and cert-manager's: the API
// server's own validation (schemas, CEL rules of the CRDs, defaulting,
// RBAC escalation checks) accepts the chart as rendered.
func TestDryRunApply(t *testing.T) {
	for _, c := range matrix() {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, c.rel)
			ensureNamespace(t, c.rel.namespace)
			for _, o := range r.objects {
				// The other namespaces it renders into (the TLS Secrets'
				// Roles) exist before an install, as the release's does.
				if ns := o.GetNamespace(); ns != "" {
					ensureNamespace(t, ns)
				}
			}
			if len(r.objects) == 0 {
				t.Fatal("nothing rendered")
			}
			for _, o := range r.objects {
				err := k8s.Apply(ctx(t), client.ApplyConfigurationFromUnstructured(o),
					client.DryRunAll, client.FieldOwner("pillar-csi-chart-test"), client.ForceOwnership)
				if err != nil {
					t.Errorf("dry-run apply of %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			t.Logf("%d objects accepted", len(r.objects))
		})
	}
}
