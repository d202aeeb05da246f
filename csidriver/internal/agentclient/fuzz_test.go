package agentclient_test

import (
	"crypto/tls"
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/fakeagent"
)

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// FuzzClientTLS builds the client configuration from an arbitrary TLS
// Secret. What it refuses is a *MaterialError naming one of the Secret's
// keys. What it accepts verifies the agent: a CA pool, no skipped
// verification, TLS 1.2 at least, one client certificate that has not
// expired, the server name asked for (else the address's host), and a
// digest that is the same for the same material and changes with the
// server name.
func FuzzClientTLS(f *testing.F) {
	pki, err := fakeagent.NewPKI("ca")
	if err != nil {
		f.Fatal(err)
	}
	crt, key, err := pki.Issue("controller", false, nil, time.Time{})
	if err != nil {
		f.Fatal(err)
	}
	expired, expiredKey, err := pki.Issue("controller", false, nil, time.Now().Add(-time.Hour))
	if err != nil {
		f.Fatal(err)
	}
	_, otherKey, err := pki.Issue("other", false, nil, time.Time{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pki.CAPEM, crt, key, "", "10.0.0.7:9420")
	f.Add(pki.CAPEM, crt, key, "agent.example", "[fd00::7]:9420")
	f.Add(pki.CAPEM, expired, expiredKey, "", "10.0.0.7:9420")
	f.Add(pki.CAPEM, crt, otherKey, "", "10.0.0.7:9420")
	f.Add(key, crt, key, "", "10.0.0.7")
	f.Add(append(slices.Clone(pki.CAPEM), crt[:len(crt)/2]...), crt, key, "", "agent:9420")
	f.Add([]byte{}, crt, key, "", "")
	f.Add(pki.CAPEM, append(slices.Clone(crt), pki.CAPEM...), key, "", "10.0.0.7:9420")
	now := time.Now()
	f.Fuzz(func(t *testing.T, ca, cert, key []byte, serverName, address string) {
		data := map[string][]byte{agentclient.KeyCA: ca, agentclient.KeyCert: cert, agentclient.KeyKey: key}
		cfg, digest, err := agentclient.ClientTLS(data, serverName, address, now)
		if err != nil {
			var me *agentclient.MaterialError
			if cfg != nil || digest != "" || !errors.As(err, &me) ||
				!slices.Contains([]string{agentclient.KeyCA, agentclient.KeyCert, agentclient.KeyKey, agentclient.KeyCert + "/" + agentclient.KeyKey}, me.Key) {
				t.Fatalf("ClientTLS = %v, %q, %v", cfg, digest, err)
			}
			return
		}
		if cfg.RootCAs == nil || cfg.InsecureSkipVerify || cfg.VerifyPeerCertificate != nil || cfg.MinVersion < tls.VersionTLS12 || len(cfg.Certificates) != 1 {
			t.Fatalf("accepted material gives a configuration that does not verify the agent: %+v", cfg)
		}
		if leaf := cfg.Certificates[0].Leaf; leaf == nil || now.After(leaf.NotAfter) {
			t.Fatalf("client certificate %v: missing or expired", leaf)
		}
		if serverName != "" && cfg.ServerName != serverName {
			t.Fatalf("server name %q became %q", serverName, cfg.ServerName)
		}
		if !digestRE.MatchString(digest) {
			t.Fatalf("digest %q", digest)
		}
		if _, again, err := agentclient.ClientTLS(data, serverName, address, now); err != nil || again != digest {
			t.Fatalf("the same material again: digest %q, %v; want %q", again, err, digest)
		}
		if _, other, err := agentclient.ClientTLS(data, cfg.ServerName+"x", address, now); err != nil || other == digest {
			t.Fatalf("another server name: digest %q, %v; want one other than %q", other, err, digest)
		}
	})
}
