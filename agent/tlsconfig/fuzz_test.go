package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/agent/internal/testpki"
)

// FuzzParseCAs feeds the CA bundle parser arbitrary file contents. It
// accepts a bundle only if it holds at least one CERTIFICATE block and
// every CERTIFICATE block that PEM decoding yields is a certificate, and
// the pool then trusts exactly those certificates: nothing skipped,
// nothing added.
func FuzzParseCAs(f *testing.F) {
	ca, other := testpki.NewCA(f, "clients"), testpki.NewCA(f, "others")
	pair := ca.Client(f, "controller")
	f.Add(ca.CertPEM)
	f.Add(append(slices.Clone(ca.CertPEM), other.CertPEM...))
	f.Add(append(append(slices.Clone(pair.KeyPEM), '\n'), ca.CertPEM...))
	f.Add(pair.KeyPEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add(ca.CertPEM[:len(ca.CertPEM)/2])
	f.Add(append(slices.Clone(ca.CertPEM), "garbage after the bundle\n"...))
	f.Add([]byte(" \n\t"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pool, err := parseCAs(b)
		if (pool == nil) == (err == nil) {
			t.Fatalf("parseCAs = %v, %v", pool, err)
		}
		want := x509.NewCertPool()
		n, bad := 0, false
		for rest := b; ; {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			if blk.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				bad = true
				break
			}
			want.AddCert(c)
			n++
		}
		switch {
		case (bad || n == 0) != (err != nil):
			t.Fatalf("%d certificates, a bad one %v: parseCAs error %v", n, bad, err)
		case err == nil && !pool.Equal(want):
			t.Fatalf("the pool is not the bundle's %d certificates", n)
		}
	})
}

// FuzzBuild feeds the material check arbitrary certificate, key and CA
// file contents. What it refuses is an *Error of the parse or check
// naming the file at fault. What it accepts is a certificate that has not
// expired with its own key, served with client certificates required and
// verified against the CA file's certificates, TLS 1.2 at least, and no
// session tickets (a resumed session would skip that verification).
func FuzzBuild(f *testing.F) {
	clients, servers := testpki.NewCA(f, "clients"), testpki.NewCA(f, "servers")
	good, other := servers.Server(f, "agent"), servers.Server(f, "other")
	expired := servers.Issue(f, "agent", true, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	future := servers.Issue(f, "agent", true, time.Now().Add(time.Hour), time.Now().Add(48*time.Hour))
	f.Add(good.CertPEM, good.KeyPEM, clients.CertPEM)
	f.Add(append(slices.Clone(good.CertPEM), servers.CertPEM...), good.KeyPEM, append(slices.Clone(clients.CertPEM), servers.CertPEM...))
	f.Add(future.CertPEM, future.KeyPEM, clients.CertPEM)
	f.Add(good.CertPEM, other.KeyPEM, clients.CertPEM)
	f.Add(expired.CertPEM, expired.KeyPEM, clients.CertPEM)
	f.Add(good.KeyPEM, good.CertPEM, clients.CertPEM)
	f.Add(good.CertPEM[:len(good.CertPEM)/2], good.KeyPEM, clients.CertPEM)
	f.Add(good.CertPEM, good.KeyPEM, good.KeyPEM)
	f.Add(good.CertPEM, good.KeyPEM, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{}, []byte{}, []byte{})
	now := time.Now()
	files := Files{CertFile: "/tls/tls.crt", KeyFile: "/tls/tls.key", CAFile: "/tls/ca.crt"}
	f.Fuzz(func(t *testing.T, cert, key, ca []byte) {
		r := &Reloader{files: files, logger: slog.New(slog.DiscardHandler), now: func() time.Time { return now }}
		m, err := r.build(rawFiles{cert: cert, key: key, ca: ca})
		if err != nil {
			var e *Error
			if m != nil || !errors.As(err, &e) || e.Op != "parse" && e.Op != "check" ||
				!strings.Contains(e.Path, files.CertFile) && !strings.Contains(e.Path, files.KeyFile) && !strings.Contains(e.Path, files.CAFile) {
				t.Fatalf("build = %v, %v", m, err)
			}
			return
		}
		c := m.config
		if m.leaf == nil || now.After(m.leaf.NotAfter) || len(c.Certificates) != 1 || !bytes.Equal(c.Certificates[0].Certificate[0], m.leaf.Raw) {
			t.Fatalf("served certificate %v: missing, expired or not the leaf", m.leaf)
		}
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			t.Fatalf("accepted a certificate and key that do not pair: %v", err)
		}
		pool, err := parseCAs(ca)
		if err != nil || c.ClientCAs == nil || !c.ClientCAs.Equal(pool) {
			t.Fatalf("client CAs are not the CA file's (%v)", err)
		}
		if c.ClientAuth != tls.RequireAndVerifyClientCert || c.MinVersion < tls.VersionTLS12 || !c.SessionTicketsDisabled ||
			c.InsecureSkipVerify || c.VerifyPeerCertificate != nil || c.GetConfigForClient != nil || !slices.Equal(c.NextProtos, []string{"h2"}) {
			t.Fatalf("accepted material gives a configuration that does not verify clients: %+v", c)
		}
	})
}
