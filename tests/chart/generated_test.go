package chart

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// generatedNodes are the storage nodes of the tls.mode generated cases:
// one reached through its Node's InternalIP, one at an IP address.
var generatedNodes = []any{
	map[string]any{"name": "storage-1", "nodeName": "storage-1"},
	map[string]any{"name": "storage-2", "nodeName": "storage-2", "address": "192.0.2.20"},
}

// generatedNames are what each generated node's certificate must name.
var generatedNames = map[string][]string{
	"storage-1": {"storage-1"},
	"storage-2": {"storage-2", "192.0.2.20"},
}

// checkGeneratedTLS asserts tls.mode generated: one agent DaemonSet per
// storage node, pinned to it and mounting only its own certificate, which
// names that node and no other; the controller's client certificate; and
// a CA that no pod mounts.
func checkGeneratedTLS(t *testing.T, r *rendered, n objectNames) {
	t.Helper()
	secrets := map[string]string{}
	for node := range generatedNames {
		secrets[node] = n.fullname + "-agent-tls-" + node
	}
	checkPerNodeAgents(t, r, n, secrets)
	ca := secretCA(t, get[corev1.Secret](t, r, "Secret", n.fullname+"-ca"))
	for node, names := range generatedNames {
		secret := secrets[node]
		s := get[corev1.Secret](t, r, "Secret", secret)
		leaf := secretLeaf(t, s, ca)
		for _, name := range names {
			if err := verifyFor(leaf, ca, name, x509.ExtKeyUsageServerAuth); err != nil {
				t.Errorf("%s's certificate does not serve %s: %v", node, name, err)
			}
		}
		for other, otherNames := range generatedNames {
			if other == node {
				continue
			}
			for _, name := range otherNames {
				if verifyFor(leaf, ca, name, x509.ExtKeyUsageServerAuth) == nil {
					t.Errorf("%s's certificate also serves %s, a name of %s", node, name, other)
				}
			}
		}
	}
	client := secretLeaf(t, get[corev1.Secret](t, r, "Secret", n.fullname+"-controller-client-tls"), ca)
	if client.Subject.CommonName != "pillar-controller" {
		t.Errorf("controller's certificate is %q's, want pillar-controller's (tls.clientName)", client.Subject.CommonName)
	}
	if err := verifyFor(client, ca, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("controller's certificate is no client certificate of the CA: %v", err)
	}
	for _, o := range r.find("PillarAgent") {
		a := get[v1alpha1.PillarAgent](t, r, "PillarAgent", o.GetName())
		if a.Spec.TLS == nil || a.Spec.TLS.SecretRef.Name != v1alpha1.ObjectName(n.fullname+"-controller-client-tls") {
			t.Errorf("PillarAgent %s: tls %+v, want the controller's generated Secret", a.Name, a.Spec.TLS)
		}
	}
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		for _, o := range r.find(kind) {
			spec, err := json.Marshal(o.Object["spec"])
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(spec, []byte(`"`+n.fullname+`-ca"`)) {
				t.Errorf("%s %s references the CA Secret: only helm may read its key", kind, o.GetName())
			}
		}
	}
}

// checkPerNodeAgents asserts one agent DaemonSet for each storage node
// of secrets (node name to its serving certificate's Secret) and none
// shared: each pinned to its node, selecting only its own pod, and
// mounting its node's Secret and the token, no other.
func checkPerNodeAgents(t *testing.T, r *rendered, n objectNames, secrets map[string]string) {
	t.Helper()
	if r.has("DaemonSet", n.agent) {
		t.Errorf("DaemonSet %s rendered: every storage node has its own", n.agent)
	}
	var agents int
	for _, o := range r.find("DaemonSet") {
		if o.GetLabels()["app.kubernetes.io/component"] == "agent" {
			agents++
		}
	}
	if agents != len(secrets) {
		t.Errorf("%d agent DaemonSets, want one for each of the %d storage nodes", agents, len(secrets))
	}
	for node, secret := range secrets {
		ds := n.agent + "-" + node
		checkAgentDaemonSet(t, r, n, ds, secret, []string{"^/dev/zd", "^/dev/nvme"})
		d := get[appsv1.DaemonSet](t, r, "DaemonSet", ds)
		if got := d.Spec.Selector.MatchLabels["pillar-csi.io/storage-node"]; got != node {
			t.Errorf("DaemonSet %s selects storage-node %q, want %q: two DaemonSets would fight over one pod", ds, got, node)
		}
		pin := []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}
		aff := d.Spec.Template.Spec.Affinity
		if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			t.Errorf("DaemonSet %s is not pinned to node %s", ds, node)
		} else if diff := cmp.Diff(pin, aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms); diff != "" {
			t.Errorf("DaemonSet %s node affinity (-want +got):\n%s", ds, diff)
		}
		var mounted []string
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				mounted = append(mounted, v.Secret.SecretName)
			}
		}
		want := []string{n.fullname + "-agent-token", secret}
		slices.Sort(mounted)
		slices.Sort(want)
		if diff := cmp.Diff(want, mounted); diff != "" {
			t.Errorf("DaemonSet %s mounts Secrets (-want +got):\n%s", ds, diff)
		}
	}
}

// secretCA parses the CA of the generated CA Secret.
func secretCA(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	c := parseCert(t, s.Name, s.Data["tls.crt"])
	if !c.IsCA {
		t.Fatalf("Secret %s: certificate %q is no CA", s.Name, c.Subject.CommonName)
	}
	return c
}

// secretLeaf parses a generated certificate Secret, which must carry ca
// as ca.crt and a key for its certificate.
func secretLeaf(t *testing.T, s *corev1.Secret, ca *x509.Certificate) *x509.Certificate {
	t.Helper()
	if !parseCert(t, s.Name+" ca.crt", s.Data["ca.crt"]).Equal(ca) {
		t.Errorf("Secret %s: ca.crt is not the release's CA", s.Name)
	}
	if s.Type != corev1.SecretTypeTLS || len(s.Data["tls.key"]) == 0 {
		t.Errorf("Secret %s: type %s, %d bytes of key", s.Name, s.Type, len(s.Data["tls.key"]))
	}
	return parseCert(t, s.Name, s.Data["tls.crt"])
}

func parseCert(t *testing.T, what string, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM certificate", what)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return c
}

// verifyFor verifies leaf against ca for a name (DNS name or IP address;
// empty checks none) and a use.
func verifyFor(leaf, ca *x509.Certificate, name string, use x509.ExtKeyUsage) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{use}})
	return err
}

// TestGeneratedTLSKeptAcrossUpgrades installs tls.mode generated into the
// suite's API server: an upgrade keeps every certificate; a node whose
// address changed gets a new one, alone; a certificate due for renewal is
// renewed on the next upgrade, alone; a CA due for renewal is renewed with
// every certificate it signed.
func TestGeneratedTLSKeptAcrossUpgrades(t *testing.T) {
	const rel, ns = "gen", "chart-generated-test"
	const fullname = rel + "-pillar-csi"
	nodeArgs := func(addr2 string) []string {
		return []string{"--set", "tls.mode=generated",
			"--set", "storageNodes[0].name=gen-storage-1", "--set", "storageNodes[0].nodeName=storage-1",
			"--set", "storageNodes[1].name=gen-storage-2", "--set", "storageNodes[1].nodeName=storage-2",
			"--set", "storageNodes[1].address=" + addr2}
	}
	helmKube := func(args ...string) {
		t.Helper()
		if _, err := helmRun(t, append(args, "--kubeconfig", kubeconfig, "--namespace", ns)...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, a := range []string{"gen-storage-1", "gen-storage-2"} {
			pa := &v1alpha1.PillarAgent{}
			pa.Name = a
			k8s.Delete(ctx(t), pa)
		}
	})
	secretNames := []string{fullname + "-ca", fullname + "-agent-tls-storage-1", fullname + "-agent-tls-storage-2", fullname + "-controller-client-tls"}
	read := func() map[string]*corev1.Secret {
		t.Helper()
		m := map[string]*corev1.Secret{}
		for _, name := range secretNames {
			s := &corev1.Secret{}
			if err := k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
				t.Fatal(err)
			}
			m[name] = s
		}
		return m
	}
	// changed names the Secrets whose certificate differs between a and b.
	changed := func(a, b map[string]*corev1.Secret) []string {
		var out []string
		for _, name := range secretNames {
			if !bytes.Equal(a[name].Data["tls.crt"], b[name].Data["tls.crt"]) || !bytes.Equal(a[name].Data["tls.key"], b[name].Data["tls.key"]) {
				out = append(out, name)
			}
		}
		return out
	}
	// consistent checks that every certificate chains to the CA.
	consistent := func(m map[string]*corev1.Secret) {
		t.Helper()
		ca := secretCA(t, m[fullname+"-ca"])
		for _, name := range secretNames[1:] {
			secretLeaf(t, m[name], ca)
		}
	}
	expire := func(name string) {
		t.Helper()
		s := &corev1.Secret{}
		if err := k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		s.Annotations["pillar-csi.io/renew-after"] = "1"
		if err := k8s.Update(ctx(t), s); err != nil {
			t.Fatal(err)
		}
	}
	step := func(what string, args []string, want ...string) {
		t.Helper()
		before := read()
		helmKube(append([]string{"upgrade", rel, chartDir, "--skip-crds"}, args...)...)
		after := read()
		consistent(after)
		if diff := cmp.Diff(want, changed(before, after)); diff != "" {
			t.Errorf("%s: certificates made anew (-want +got):\n%s", what, diff)
		}
	}

	helmKube(append([]string{"install", rel, chartDir, "--create-namespace", "--skip-crds"}, nodeArgs("192.0.2.20")...)...)
	uninstallOnCleanup(t, rel, ns)
	consistent(read())

	step("an upgrade", nodeArgs("192.0.2.20"))
	step("storage-2's address changed", nodeArgs("192.0.2.21"), fullname+"-agent-tls-storage-2")
	expire(fullname + "-agent-tls-storage-1")
	step("storage-1's certificate due", nodeArgs("192.0.2.21"), fullname+"-agent-tls-storage-1")
	expire(fullname + "-ca")
	step("the CA due", nodeArgs("192.0.2.21"), secretNames...)

	m := read()
	ca := secretCA(t, m[fullname+"-ca"])
	leaf := secretLeaf(t, m[fullname+"-agent-tls-storage-2"], ca)
	if err := verifyFor(leaf, ca, "192.0.2.21", x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("storage-2's certificate after the changes: %v", err)
	}
	if verifyFor(leaf, ca, "192.0.2.20", x509.ExtKeyUsageServerAuth) == nil {
		t.Error("storage-2's certificate still serves its old address")
	}
}

// TestGeneratedLongNodeNames: two storage nodes whose names share their
// first 63 characters get two agent DaemonSets, and each selects its own
// pods with a valid label value.
func TestGeneratedLongNodeNames(t *testing.T) {
	long := "storage-node-in-rack-one-of-the-datacenter-in-frankfurt-main.example.net"
	nodes := []any{
		map[string]any{"name": "s1", "nodeName": long + "-1"},
		map[string]any{"name": "s2", "nodeName": long + "-2"},
	}
	r := render(t, release{name: "production-storage", namespace: "pillar-csi", values: map[string]any{
		"tls": map[string]any{"mode": "generated"}, "storageNodes": nodes}})
	seen := map[string]bool{}
	labels := map[string]bool{}
	for _, o := range r.find("DaemonSet") {
		d := get[appsv1.DaemonSet](t, r, "DaemonSet", o.GetName())
		if d.Spec.Template.Spec.Containers[0].Name != "pillar-agent" {
			continue
		}
		if len(d.Name) > 63 {
			t.Errorf("DaemonSet name %q is %d characters", d.Name, len(d.Name))
		}
		v := d.Spec.Selector.MatchLabels["pillar-csi.io/storage-node"]
		if len(v) > 63 || v == "" {
			t.Errorf("DaemonSet %s selects storage-node %q", d.Name, v)
		}
		seen[d.Name], labels[v] = true, true
	}
	if len(seen) != 2 || len(labels) != 2 {
		t.Fatalf("agent DaemonSets %v with labels %v; want two of each", seen, labels)
	}
}
