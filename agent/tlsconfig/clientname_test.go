package tlsconfig

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/agent/internal/testpki"
	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

// TestClientName refuses a client certificate of the right CA that is
// issued to another name, when a client name is configured.
func TestClientName(t *testing.T) {
	p := newPKI(t) // p.client is "controller", from p.cliCA
	f := testpki.WriteFiles(t, t.TempDir(), p.srvCA.Server(t, "agent"), p.cliCA.CertPEM)
	for _, tc := range []struct {
		name, clientName, cert string
		ok                     bool
	}{
		{"no name configured: any client of the CA", "", "tenant-workload", true},
		{"the configured name", "controller", "controller", true},
		{"another name of the same CA", "controller", "tenant-workload", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log syncbuf.Buffer
			r, err := New(files(f), Options{ClientName: tc.clientName, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			addr := tlsServer(t, r.ServerConfig())
			cert := p.cliCA.Client(t, tc.cert).TLS(t)
			_, err = dial(addr, p.roots, cert)
			if (err == nil) != tc.ok {
				t.Errorf("client %q with the agent accepting %q: %v, want accepted %v", tc.cert, tc.clientName, err, tc.ok)
			}
			if logged := strings.Contains(log.String(), "TLS client refused") && strings.Contains(log.String(), "peer=127.0.0.1:"); logged == tc.ok {
				t.Errorf("the refusal logged with the peer: %v, want %v (log %q)", logged, !tc.ok, log.String())
			}
		})
	}
}

func TestCarriesName(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "cn"}, DNSNames: []string{"a.example", "pillar-controller"}}
	for name, want := range map[string]bool{"cn": true, "pillar-controller": true, "a.example": true, "pillar": false, "": false} {
		if got := carriesName(cert, name); got != want {
			t.Errorf("carriesName(%q) = %v, want %v", name, got, want)
		}
	}
}
