package chart

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/agentauth"
)

// TestAgentTokenKeptAcrossUpgrades installs the chart into the suite's
// API server: the generated agent token survives helm upgrade, and so does
// a key an operator added to rotate it (docs/install.md).
func TestAgentTokenKeptAcrossUpgrades(t *testing.T) {
	const rel, ns = "tok", "chart-token-test"
	helmKube := func(args ...string) {
		t.Helper()
		if _, err := helmRun(t, append(args, "--kubeconfig", kubeconfig, "--namespace", ns)...); err != nil {
			t.Fatal(err)
		}
	}
	helmKube("install", rel, chartDir, "--create-namespace", "--skip-crds")
	uninstallOnCleanup(t, rel, ns)
	key := client.ObjectKey{Namespace: ns, Name: rel + "-pillar-csi-agent-token"}
	secret := func() *corev1.Secret {
		t.Helper()
		s := &corev1.Secret{}
		if err := k8s.Get(ctx(t), key, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := secret().Data[agentauth.ClientKey]
	if len(first) < agentauth.MinLength {
		t.Fatalf("installed token of %d bytes, want at least %d", len(first), agentauth.MinLength)
	}

	helmKube("upgrade", rel, chartDir, "--skip-crds")
	if got := secret().Data[agentauth.ClientKey]; !bytes.Equal(got, first) {
		t.Fatal("helm upgrade replaced the agent token: every agent and controller would refuse each other until both re-read it")
	}

	// Rotation, step 1: the operator adds the next token.
	s := secret()
	next := bytes.Repeat([]byte("n"), 48)
	s.Data["next"] = next
	if err := k8s.Update(ctx(t), s); err != nil {
		t.Fatal(err)
	}
	helmKube("upgrade", rel, chartDir, "--skip-crds")
	got := secret().Data
	if !bytes.Equal(got[agentauth.ClientKey], first) || !bytes.Equal(got["next"], next) {
		t.Fatalf("helm upgrade in the middle of a rotation: keys %v; want token unchanged and next kept", keys(got))
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
