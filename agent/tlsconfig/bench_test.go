package tlsconfig

import (
	"crypto/tls"
	"testing"

	"github.com/pillar-csi/pillar-csi/agent/internal/testpki"
)

// BenchmarkHandshake compares a full mutual-TLS handshake served by a
// Reloader (which stats the files first) with one served by a fixed
// tls.Config holding the same material: the ratio is the price of
// rotation without restart.
func BenchmarkHandshake(b *testing.B) {
	p := newPKI(b)
	srv := p.srvCA.Server(b, "agent")
	f := testpki.WriteFiles(b, b.TempDir(), srv, p.cliCA.CertPEM)
	r, err := New(files(f), Options{})
	if err != nil {
		b.Fatal(err)
	}
	static := r.cur.Load().config.Clone()
	for _, bc := range []struct {
		name string
		cfg  *tls.Config
	}{{"static", static}, {"reloader", r.ServerConfig()}} {
		b.Run(bc.name, func(b *testing.B) {
			addr := tlsServer(b, bc.cfg)
			for b.Loop() {
				if _, err := dial(addr, p.roots, p.client); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheck is the per-handshake cost of looking at unchanged files.
func BenchmarkCheck(b *testing.B) {
	p := newPKI(b)
	f := testpki.WriteFiles(b, b.TempDir(), p.srvCA.Server(b, "agent"), p.cliCA.CertPEM)
	r, err := New(files(f), Options{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		r.config()
	}
}
