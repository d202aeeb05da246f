package chart

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/agentauth"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
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

// TestPillarAgentsSurviveUninstall: helm uninstall, and an entry removed
// from storageNodes by an upgrade, leave the PillarAgents the chart made
// (helm.sh/resource-policy: keep): volumes on their nodes' stores are
// reached through them.
func TestPillarAgentsSurviveUninstall(t *testing.T) {
	const rel, ns = "keep", "chart-keep-test"
	helmKube := func(args ...string) {
		t.Helper()
		if _, err := helmRun(t, append(args, "--kubeconfig", kubeconfig, "--namespace", ns)...); err != nil {
			t.Fatal(err)
		}
	}
	node := func(i int, name string) []string {
		return []string{"--set", fmt.Sprintf("storageNodes[%d].name=%s", i, name), "--set", fmt.Sprintf("storageNodes[%d].nodeName=%s", i, name)}
	}
	agents := []string{"keep-storage-a", "keep-storage-b"}
	agent := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("PillarAgent"))
		u.SetName(name)
		return u
	}
	t.Cleanup(func() {
		for _, a := range agents {
			k8s.Delete(context.Background(), agent(a))
		}
	})
	helmKube(append(append([]string{"install", rel, chartDir, "--create-namespace", "--skip-crds"}, node(0, agents[0])...), node(1, agents[1])...)...)
	uninstallOnCleanup(t, rel, ns)
	exists := func(name string) bool {
		t.Helper()
		err := k8s.Get(ctx(t), client.ObjectKey{Name: name}, agent(name))
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for _, a := range agents {
		if !exists(a) {
			t.Fatalf("PillarAgent %s was not installed", a)
		}
	}
	helmKube(append([]string{"upgrade", rel, chartDir, "--skip-crds"}, node(0, agents[0])...)...)
	if !exists(agents[1]) {
		t.Errorf("PillarAgent %s went with its storageNodes entry", agents[1])
	}
	helmKube("uninstall", rel, "--wait")
	for _, a := range agents {
		if !exists(a) {
			t.Errorf("PillarAgent %s went with helm uninstall", a)
		}
	}
}
