package chart

import (
	"strings"
	"testing"
)

func TestLint(t *testing.T) {
	for name, args := range map[string][]string{
		"defaults":    nil,
		"certManager": {"--set", "tls.mode=certManager", "--set", "storageNodes[0].name=s1", "--set", "storageNodes[0].nodeName=s1"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := helmRun(t, append([]string{"lint", "--strict", "--kube-version", kubeVersion, chartDir}, args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestWrongValuesRefused renders values the chart must refuse, each with
// the words its error must contain: an unknown key anywhere, a wrong type,
// a value outside an enum, and combinations that cannot work.
func TestWrongValuesRefused(t *testing.T) {
	cases := []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"unknown top-level key", map[string]any{"replicas": 3}, []string{"additional properties", "replicas"}},
		{"misspelled nested key", map[string]any{"controller": map[string]any{"image": map[string]any{"repositry": "x"}}}, []string{"additional properties", "repositry"}},
		{"unknown key in a security context", map[string]any{"controller": map[string]any{"securityContext": map[string]any{"privilege": true}}}, []string{"additional properties", "privilege"}},
		{"wrong type", map[string]any{"controller": map[string]any{"replicas": "two"}}, []string{"replicas"}},
		{"port out of range", map[string]any{"agent": map[string]any{"port": 70000}}, []string{"port"}},
		{"unknown tls mode", map[string]any{"tls": map[string]any{"mode": "certmanager"}}, []string{"mode"}},
		{"unknown log level", map[string]any{"node": map[string]any{"logLevel": "verbose"}}, []string{"logLevel"}},
		{"bad duration", map[string]any{"controller": map[string]any{"provisioner": map[string]any{"timeout": "60"}}}, []string{"timeout"}},
		{"lvm reject with the filter's delimiter", map[string]any{"agent": map[string]any{"lvmReject": []any{"^/dev/(sd|vd)"}}}, []string{"lvmReject"}},
		{"storage node without node or address", map[string]any{"storageNodes": []any{map[string]any{"name": "s1", "port": 9420}}}, []string{"storageNodes"}},
		{"storage node with unknown key", map[string]any{"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1", "adress": "192.0.2.1"}}}, []string{"adress"}},
		{"secret mode without the agents' Secrets", map[string]any{"tls": map[string]any{"mode": "secret", "secret": map[string]any{"controllerSecretName": "c"}}}, []string{"agentSecretName"}},
		{"secret mode, storage node without its Secret", map[string]any{"tls": map[string]any{"mode": "secret", "secret": map[string]any{"controllerSecretName": "c"}},
			"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1", "agentSecretName": "a1"}, map[string]any{"name": "s2", "nodeName": "s2"}}},
			[]string{"s2", "agentSecretName"}},
		{"secret mode, a Secret per node and one for all", map[string]any{"tls": map[string]any{"mode": "secret", "secret": map[string]any{"agentSecretName": "a", "controllerSecretName": "c"}},
			"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1", "agentSecretName": "a1"}}}, []string{"s1", "one for all"}},
		{"secret mode without the controller's Secret", map[string]any{"tls": map[string]any{"mode": "secret", "secret": map[string]any{"agentSecretName": "a"}}}, []string{"controllerSecretName"}},
		{"a node's Secret outside tls.mode secret", map[string]any{"tls": map[string]any{"mode": "certManager"},
			"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1", "agentSecretName": "a1"}}}, []string{"s1", "only tls.mode secret"}},
		{"cert-manager mode, storage node without nodeName", map[string]any{"tls": map[string]any{"mode": "certManager"},
			"storageNodes": []any{map[string]any{"name": "s1", "address": "192.0.2.1"}}}, []string{"s1", "nodeName"}},
		{"cert-manager's names for every node, gone", map[string]any{"tls": map[string]any{"mode": "certManager", "certManager": map[string]any{"extraDNSNames": []any{"a.example"}}},
			"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1"}}}, []string{"additional properties", "extraDNSNames"}},
		{"digest that is not sha256", map[string]any{"node": map[string]any{"image": map[string]any{"digest": "v0.1.0"}}}, []string{"digest"}},
		{"digest with upper-case hex", map[string]any{"agent": map[string]any{"image": map[string]any{"digest": "sha256:" + strings.Repeat("A", 64)}}}, []string{"digest"}},
		{"misspelled admissionPolicy key", map[string]any{"admissionPolicy": map[string]any{"enable": false}}, []string{"additional properties", "enable"}},
		{"cert-manager mode without any name", map[string]any{"tls": map[string]any{"mode": "certManager"}}, []string{"storageNodes"}},
		{"generated mode without storage nodes", map[string]any{"tls": map[string]any{"mode": "generated"}}, []string{"storageNodes"}},
		{"generated mode, storage node without nodeName", map[string]any{"tls": map[string]any{"mode": "generated"},
			"storageNodes": []any{map[string]any{"name": "s1", "address": "192.0.2.1"}}}, []string{"s1", "nodeName"}},
		{"generated mode without a client name", map[string]any{"tls": map[string]any{"mode": "generated", "clientName": ""},
			"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1"}}}, []string{"clientName"}},
		{"generated mode, client name of a storage node", map[string]any{"tls": map[string]any{"mode": "generated", "clientName": "s1"},
			"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1"}}}, []string{"clientName", "s1"}},
		{"generated mode renewing on every upgrade", map[string]any{"tls": map[string]any{"mode": "generated", "generated": map[string]any{"days": 30}},
			"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1"}}}, []string{"renewBeforeDays"}},
		{"generated mode, CA shorter than its certificates", map[string]any{"tls": map[string]any{"mode": "generated", "generated": map[string]any{"caDays": 365}},
			"storageNodes": []any{map[string]any{"name": "s1", "nodeName": "s1"}}}, []string{"caDays"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := template(t, release{name: "pillar-csi", namespace: "pillar-csi", values: c.values})
			if err == nil {
				t.Fatalf("values %v were accepted; rendered %d bytes", c.values, len(out))
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %v", w, err)
				}
			}
		})
	}
}
