// Package testpki issues throwaway ECDSA certificates for tests: a CA, server
// certificates for 127.0.0.1 and client certificates, with any validity
// window. Nothing here is fit for production keys.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

// CA is a self-signed certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// Pair is an issued certificate and its key, PEM encoded.
type Pair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// TLS returns the pair as a tls.Certificate.
func (p Pair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NewCA returns a CA valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a server certificate for 127.0.0.1 and localhost, valid
// from an hour ago for a day.
func (ca *CA) Server(t testing.TB, name string) Pair {
	t.Helper()
	return ca.Issue(t, name, true, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// Client issues a client certificate valid from an hour ago for a day.
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	return ca.Issue(t, name, false, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// Issue issues a certificate with the given validity window.
func (ca *CA) Issue(t testing.TB, name string, server bool, notBefore, notAfter time.Time) Pair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Files are the paths of a server's cert, key and CA files in a directory.
type Files struct{ Dir, Cert, Key, CA string }

// WriteFiles writes a server pair and a CA bundle as tls.crt, tls.key and
// ca.crt in dir, replacing them with a rename each so that a reader never
// sees half a file.
func WriteFiles(t testing.TB, dir string, p Pair, caPEM []byte) Files {
	t.Helper()
	f := Files{Dir: dir, Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	for path, b := range map[string][]byte{f.Cert: p.CertPEM, f.Key: p.KeyPEM, f.CA: caPEM} {
		WriteAtomic(t, path, b)
	}
	return f
}

// WriteAtomic replaces path with b through a temporary file and a rename.
func WriteAtomic(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// SecretVolume lays files out the way the kubelet projects a Secret:
// dir/tls.crt -> ..data/tls.crt, and ..data -> a timestamped snapshot
// directory. Swap replaces the snapshot by renaming a new ..data symlink
// over the old one, as the kubelet's atomic writer does.
type SecretVolume struct {
	Dir string
	n   int
}

// NewSecretVolume creates the layout in dir with the given contents.
func NewSecretVolume(t testing.TB, dir string, p Pair, caPEM []byte) *SecretVolume {
	t.Helper()
	v := &SecretVolume{Dir: dir}
	v.Swap(t, map[string][]byte{"tls.crt": p.CertPEM, "tls.key": p.KeyPEM, "ca.crt": caPEM})
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// Files returns the paths a server is configured with.
func (v *SecretVolume) Files() Files {
	return Files{Dir: v.Dir, Cert: filepath.Join(v.Dir, "tls.crt"), Key: filepath.Join(v.Dir, "tls.key"), CA: filepath.Join(v.Dir, "ca.crt")}
}

// Swap writes a new snapshot and points ..data at it, then removes the
// previous snapshot.
func (v *SecretVolume) Swap(t testing.TB, files map[string][]byte) {
	t.Helper()
	v.n++
	snap := "..2026_11_30_00_00_00." + big.NewInt(int64(v.n)).String()
	if err := os.Mkdir(filepath.Join(v.Dir, snap), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.Dir, snap, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	if err := os.Symlink(snap, filepath.Join(v.Dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(v.Dir, "..data_tmp"), filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.Dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
