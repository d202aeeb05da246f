package controllerapp_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
)

// tlsSecret holds a client certificate from pki and trusts agentCA.
func tlsSecret(t *testing.T, name string, pki *fakeagent.PKI, agentCA []byte) *corev1.Secret {
	t.Helper()
	crt, key, err := pki.Issue("pillar-controller", false, nil, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data: map[string][]byte{"ca.crt": agentCA, "tls.crt": crt, "tls.key": key}}
}

func TestAgentTLS(t *testing.T) {
	ctx := context.Background()
	pki1, err := fakeagent.NewPKI("ca-1")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := pki1.ServerCreds([]string{"agent.storage.test"}, pki1.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	fa := startAgent(t, fakeagent.Options{NodeName: "storage-t", Version: "v1", Creds: creds})
	a := agentObj("agent-tls", "", "127.0.0.1", fa.Port())
	a.Spec.TLS = &v1alpha1.AgentTLS{SecretRef: v1alpha1.SecretReference{Name: "agent-tls", Namespace: namespace}, ServerName: "agent.storage.test"}

	// A Secret in a namespace the controller may not read.
	a.Spec.TLS.SecretRef.Namespace = "kube-system"
	mustCreate(t, a)
	c := waitReady(t, a, metav1.ConditionFalse, "TLSSecretNotAllowed", quick)
	wantContains(t, "message", c.Message, "kube-system/agent-tls", "only in "+namespace, "-tls-secret-namespaces")
	get(t, a.Name, a)
	a.Spec.TLS.SecretRef.Namespace = namespace
	if err := admin.Update(ctx, a); err != nil {
		t.Fatal(err)
	}

	// No Secret yet.
	c = waitReady(t, a, metav1.ConditionFalse, "TLSSecretMissing", quick)
	wantContains(t, "message", c.Message, "pillar-csi/agent-tls", "ca.crt, tls.crt and tls.key")

	// A Secret without the key.
	sec := tlsSecret(t, "agent-tls", pki1, pki1.CAPEM)
	delete(sec.Data, "tls.key")
	mustCreate(t, sec)
	c = waitReady(t, a, metav1.ConditionFalse, "TLSSecretInvalid", quick)
	wantContains(t, "message", c.Message, "pillar-csi/agent-tls", "tls.key")

	// Good material: Ready over mutual TLS.
	good := tlsSecret(t, "agent-tls", pki1, pki1.CAPEM)
	sec.Data = good.Data
	if err := admin.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)

	// The agent's certificates are rotated to a new CA: the controller's
	// next connection fails verification...
	pki2, err := fakeagent.NewPKI("ca-2")
	if err != nil {
		t.Fatal(err)
	}
	creds2, err := pki2.ServerCreds([]string{"agent.storage.test"}, pki2.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	stopAndServe(t, fa, creds2)
	c = waitReady(t, a, metav1.ConditionFalse, v1alpha1.ReasonTLSFailed, quick)
	wantContains(t, "message", c.Message, "pillar-csi/agent-tls", "agent.storage.test")

	// ...until the Secret is rotated too: picked up without a restart.
	rotated := tlsSecret(t, "agent-tls", pki2, pki2.CAPEM)
	sec.Data = rotated.Data
	if err := admin.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, metav1.ConditionTrue, v1alpha1.ReasonAgentReady, quick)

	// A wrong server name is refused.
	patch := a.DeepCopy()
	patch.Spec.TLS.ServerName = "someone.else.test"
	if err := admin.Update(ctx, patch); err != nil {
		t.Fatal(err)
	}
	c = waitReady(t, patch, metav1.ConditionFalse, v1alpha1.ReasonTLSFailed, quick)
	wantContains(t, "message", c.Message, "someone.else.test")

	deleteAndWait(t, patch, sec)
}

func stopAndServe(t *testing.T, fa *fakeagent.Agent, creds credentials.TransportCredentials) {
	t.Helper()
	fa.SetCreds(creds)
	if err := fa.Restart(false); err != nil {
		t.Fatal(err)
	}
}
