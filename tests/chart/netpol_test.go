package chart

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestTenantEgressPolicyExample: the example NetworkPolicy that SECURITY.md
// and docs/install.md tell an operator to apply is accepted by
// kube-apiserver as written, and keeps a tenant's pods off the
// placeholder storage addresses while allowing everything else. What it
// does in a cluster whose network plugin enforces NetworkPolicy is
// TestTenantEgressPolicy's, in the lab's two guests (make e2e-two).
func TestTenantEgressPolicyExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "examples", "security", "tenant-egress-networkpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var np networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict(b, &np); err != nil {
		t.Fatalf("the example: %v", err)
	}
	np.Namespace = "default"
	if err := k8s.Create(ctx(t), &np, client.DryRunAll); err != nil {
		t.Fatalf("kube-apiserver refused the example: %v", err)
	}
	if len(np.Spec.PodSelector.MatchLabels)+len(np.Spec.PodSelector.MatchExpressions) != 0 {
		t.Errorf("the example selects %v, want every pod of its namespace", np.Spec.PodSelector)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(np.Spec.Egress) != 1 {
		t.Fatalf("the example has policy types %v and %d egress rules, want one Egress rule", np.Spec.PolicyTypes, len(np.Spec.Egress))
	}
	except := map[string][]string{}
	for _, to := range np.Spec.Egress[0].To {
		if to.IPBlock == nil {
			t.Fatalf("the example's peer %+v: want address blocks only", to)
		}
		except[to.IPBlock.CIDR] = to.IPBlock.Except
	}
	if len(np.Spec.Egress[0].Ports) != 0 {
		t.Errorf("the example limits ports %v: it must allow every port but the storage nodes'", np.Spec.Egress[0].Ports)
	}
	want := map[string][]string{"0.0.0.0/0": {"192.0.2.0/24"}, "::/0": {"2001:db8::/32"}}
	for cidr, ex := range want {
		if !slices.Equal(except[cidr], ex) {
			t.Errorf("the example allows %s except %v, want except %v (the placeholders the docs name)", cidr, except[cidr], ex)
		}
	}
}
