package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/agent/internal/testpki"
)

func files(f testpki.Files) Files { return Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA} }

func TestNewRejectsBadMaterial(t *testing.T) {
	ca := testpki.NewCA(t, "clients")
	srvCA := testpki.NewCA(t, "servers")
	good := srvCA.Server(t, "agent")
	other := srvCA.Server(t, "other")
	expired := srvCA.Issue(t, "agent", true, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))

	tests := []struct {
		name   string
		cert   []byte
		key    []byte
		ca     []byte
		noCert bool // do not create the cert file
		op     string
		file   string // which file the error names
		want   string
	}{
		{name: "missing cert file", noCert: true, key: good.KeyPEM, ca: ca.CertPEM, op: "read", file: "tls.crt", want: "no such file"},
		{name: "cert not PEM", cert: []byte("not a certificate\n"), key: good.KeyPEM, ca: ca.CertPEM, op: "parse", file: "tls.crt", want: "no PEM CERTIFICATE"},
		{name: "key not PEM", cert: good.CertPEM, key: []byte("garbage"), ca: ca.CertPEM, op: "parse", file: "tls.key", want: "no PEM private key"},
		{name: "key does not match cert", cert: good.CertPEM, key: other.KeyPEM, ca: ca.CertPEM, op: "parse", file: "tls.key", want: "does not match"},
		{name: "half-written cert", cert: good.CertPEM[:len(good.CertPEM)/2], key: good.KeyPEM, ca: ca.CertPEM, op: "parse", file: "tls.crt", want: "no PEM CERTIFICATE"},
		{name: "expired cert", cert: expired.CertPEM, key: expired.KeyPEM, ca: ca.CertPEM, op: "check", file: "tls.crt", want: "expired at"},
		{name: "CA file without certificates", cert: good.CertPEM, key: good.KeyPEM, ca: good.KeyPEM, op: "parse", file: "ca.crt", want: "holds no certificates"},
		{name: "CA file empty", cert: good.CertPEM, key: good.KeyPEM, ca: nil, op: "parse", file: "ca.crt", want: "holds no certificates"},
		{name: "CA block corrupt", cert: good.CertPEM, key: good.KeyPEM, ca: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), op: "parse", file: "ca.crt", want: "CA certificate 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := Files{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), CAFile: filepath.Join(dir, "ca.crt")}
			if !tc.noCert {
				mustWrite(t, f.CertFile, tc.cert)
			}
			mustWrite(t, f.KeyFile, tc.key)
			mustWrite(t, f.CAFile, tc.ca)
			r, err := New(f, Options{})
			if err == nil {
				t.Fatalf("New succeeded (%v), want an error", r.Leaf().Subject)
			}
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("error %v is %T, want *Error", err, err)
			}
			if te.Op != tc.op || !strings.Contains(te.Path, tc.file) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %q (op %q path %q), want op %q, path naming %s, text containing %q", err, te.Op, te.Path, tc.op, tc.file, tc.want)
			}
		})
	}
}

func TestNewRequiresAllFiles(t *testing.T) {
	_, err := New(Files{CertFile: "/a"}, Options{})
	var te *Error
	if !errors.As(err, &te) || te.Path != "key,ca" {
		t.Fatalf("error = %v, want an *Error naming key,ca", err)
	}
}

func TestNotYetValidIsServedWithAWarning(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	future := ca.Issue(t, "agent", true, time.Now().Add(time.Hour), time.Now().Add(48*time.Hour))
	f := testpki.WriteFiles(t, t.TempDir(), future, ca.CertPEM)
	var log bytes.Buffer
	r, err := New(files(f), Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if r.Leaf().SerialNumber.Cmp(future.Cert.SerialNumber) != 0 || !strings.Contains(log.String(), "not valid yet") {
		t.Fatalf("leaf %v, log %q", r.Leaf().SerialNumber, log.String())
	}
}

// tlsServer serves r's configuration on loopback; every accepted
// connection completes a handshake and writes "ok".
func tlsServer(t testing.TB, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial completes a handshake and reads the server's "ok": with TLS 1.3 a
// refused client certificate only shows on the first read.
func dial(addr string, roots *x509.CertPool, certs ...tls.Certificate) (*x509.Certificate, error) {
	return dialConfig(addr, &tls.Config{RootCAs: roots, Certificates: certs, ServerName: "127.0.0.1"})
}

func dialConfig(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	if string(b) != "ok" {
		return nil, errors.New("server closed without answering")
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

type pki struct {
	srvCA, cliCA *testpki.CA
	roots        *x509.CertPool
	client       tls.Certificate
}

func newPKI(t testing.TB) pki {
	srvCA, cliCA := testpki.NewCA(t, "servers"), testpki.NewCA(t, "clients")
	return pki{srvCA: srvCA, cliCA: cliCA, roots: srvCA.Pool(), client: cliCA.Client(t, "controller").TLS(t)}
}

func TestClientAuthentication(t *testing.T) {
	p := newPKI(t)
	f := testpki.WriteFiles(t, t.TempDir(), p.srvCA.Server(t, "agent"), p.cliCA.CertPEM)
	r, err := New(files(f), Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, r.ServerConfig())

	if _, err := dial(addr, p.roots, p.client); err != nil {
		t.Fatalf("client with a valid certificate: %v", err)
	}
	if _, err := dialConfig(addr, &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.client}, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12}); err != nil {
		t.Fatalf("TLS 1.2 client with a valid certificate: %v", err)
	}
	if _, err := dial(addr, p.roots); err == nil {
		t.Fatal("client without a certificate was accepted")
	}
	stranger := testpki.NewCA(t, "clients").Client(t, "controller").TLS(t)
	if _, err := dial(addr, p.roots, stranger); err == nil {
		t.Fatal("client certificate from another CA was accepted")
	}
	expired := p.cliCA.Issue(t, "controller", false, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)).TLS(t)
	if _, err := dial(addr, p.roots, expired); err == nil {
		t.Fatal("expired client certificate was accepted")
	}
	// No session is resumed: every connection has its certificate
	// verified against the CA bundle of the moment.
	cached := &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.client}, ServerName: "127.0.0.1",
		ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	for i := range 2 {
		c, err := tls.Dial("tcp", addr, cached)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(c) // session tickets, if any, arrive after the handshake
		if c.ConnectionState().DidResume {
			t.Fatalf("connection %d resumed a session", i+1)
		}
		c.Close()
	}
	// A TLS 1.1 client is refused: the floor is 1.2.
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.client}, MaxVersion: tls.VersionTLS11, ServerName: "127.0.0.1"})
	if err == nil {
		c.Close()
		t.Fatal("TLS 1.1 handshake succeeded")
	}
}

func TestRotationByRename(t *testing.T) {
	p := newPKI(t)
	first := p.srvCA.Server(t, "agent")
	f := testpki.WriteFiles(t, t.TempDir(), first, p.cliCA.CertPEM)
	var log bytes.Buffer
	r, err := New(files(f), Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, r.ServerConfig())
	expectSerial(t, addr, p, first)

	second := p.srvCA.Server(t, "agent")
	testpki.WriteFiles(t, f.Dir, second, p.cliCA.CertPEM)
	expectSerial(t, addr, p, second)

	// A rotation caught half-written: the new certificate is there but its
	// key is not yet. The previous material keeps serving, and the failure
	// is logged once however many handshakes see it.
	third := p.srvCA.Server(t, "agent")
	testpki.WriteAtomic(t, f.Cert, third.CertPEM)
	for range 3 {
		expectSerial(t, addr, p, second)
	}
	if _, failures := r.Counts(); failures != 1 {
		t.Fatalf("failures = %d, want 1 (log: %s)", failures, log.String())
	}
	if n := strings.Count(log.String(), "still serving the previous certificate"); n != 1 {
		t.Fatalf("failure logged %d times, want once:\n%s", n, log.String())
	}
	testpki.WriteAtomic(t, f.Key, third.KeyPEM)
	expectSerial(t, addr, p, third)

	// Garbage in every file: still the last good material.
	for _, path := range []string{f.Cert, f.Key, f.CA} {
		testpki.WriteAtomic(t, path, []byte("garbage"))
	}
	expectSerial(t, addr, p, third)
	if reloads, failures := r.Counts(); reloads != 2 || failures != 2 {
		t.Fatalf("reloads, failures = %d, %d, want 2, 2", reloads, failures)
	}
}

func TestRotationInPlace(t *testing.T) {
	p := newPKI(t)
	first := p.srvCA.Server(t, "agent")
	f := testpki.WriteFiles(t, t.TempDir(), first, p.cliCA.CertPEM)
	r, err := New(files(f), Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, r.ServerConfig())
	expectSerial(t, addr, p, first)
	// Rewritten in place (same inodes); the mtime is set apart explicitly
	// because two writes within one timestamp tick look identical to stat.
	second := p.srvCA.Server(t, "agent")
	mustWrite(t, f.Cert, second.CertPEM)
	mustWrite(t, f.Key, second.KeyPEM)
	later := time.Now().Add(time.Second)
	for _, path := range []string{f.Cert, f.Key} {
		if err := os.Chtimes(path, later, later); err != nil {
			t.Fatal(err)
		}
	}
	expectSerial(t, addr, p, second)
}

func TestRecheckReadsUnchangedLookingFiles(t *testing.T) {
	p := newPKI(t)
	first := p.srvCA.Server(t, "agent")
	f := testpki.WriteFiles(t, t.TempDir(), first, p.cliCA.CertPEM)
	now := time.Now()
	clock := func() time.Time { return now }
	r, err := New(files(f), Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite the files, then make the reloader believe a stat shows
	// nothing new, as after an in-place rewrite of equal size within one
	// timestamp tick. Only the periodic read can see such a change.
	second := p.srvCA.Server(t, "agent")
	testpki.WriteFiles(t, f.Dir, second, p.cliCA.CertPEM)
	m := *r.cur.Load()
	m.stamp = r.stat()
	r.cur.Store(&m)
	r.config()
	if r.Leaf().SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatal("files were read again before the recheck interval")
	}
	now = now.Add(DefaultRecheckInterval)
	r.config()
	if r.Leaf().SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after the recheck interval: leaf %v, want %v", r.Leaf().SerialNumber, second.Cert.SerialNumber)
	}
}

func TestRotationBySecretVolumeSwap(t *testing.T) {
	p := newPKI(t)
	first := p.srvCA.Server(t, "agent")
	v := testpki.NewSecretVolume(t, t.TempDir(), first, p.cliCA.CertPEM)
	f := v.Files()
	r, err := New(files(f), Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, r.ServerConfig())
	expectSerial(t, addr, p, first)
	// A client that caches sessions, to try resuming after the rotation.
	cached := &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.client}, ServerName: "127.0.0.1",
		ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	if _, err := dialConfig(addr, cached); err != nil {
		t.Fatal(err)
	}

	// cert-manager renews the certificate and the CA together: clients
	// with a certificate of the new CA are accepted, old ones refused.
	newCliCA := testpki.NewCA(t, "clients-2")
	second := p.srvCA.Server(t, "agent")
	v.Swap(t, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM, "ca.crt": newCliCA.CertPEM})
	newClient := newCliCA.Client(t, "controller").TLS(t)
	got, err := dial(addr, p.roots, newClient)
	if err != nil {
		t.Fatalf("client of the rotated CA: %v", err)
	}
	if got.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("served serial %v, want %v", got.SerialNumber, second.Cert.SerialNumber)
	}
	if _, err := dial(addr, p.roots, p.client); err == nil {
		t.Fatal("client of the replaced CA was still accepted")
	}
	if _, err := dialConfig(addr, cached); err == nil {
		t.Fatal("client of the replaced CA was accepted by resuming its session")
	}

	// A snapshot with a broken key keeps the last good material.
	v.Swap(t, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": []byte("-----BEGIN PRIVATE KEY-----\n"), "ca.crt": newCliCA.CertPEM})
	if got, err := dial(addr, p.roots, newClient); err != nil || got.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after a broken swap: %v, %v", got, err)
	}
}

func expectSerial(t *testing.T, addr string, p pki, want testpki.Pair) {
	t.Helper()
	got, err := dial(addr, p.roots, p.client)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if got.SerialNumber.Cmp(want.Cert.SerialNumber) != 0 {
		t.Fatalf("server presented serial %v, want %v", got.SerialNumber, want.Cert.SerialNumber)
	}
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMissingFileIsNotExist(t *testing.T) {
	_, err := New(Files{CertFile: "/nonexistent/tls.crt", KeyFile: "/nonexistent/tls.key", CAFile: "/nonexistent/ca.crt"}, Options{})
	if !errors.Is(err, os.ErrNotExist) || err.Error() != "read /nonexistent/tls.crt: no such file or directory" {
		t.Fatalf("error = %v", err)
	}
}

// TestRotationUnderLoad rotates the files, some rotations broken, while
// clients keep connecting: every handshake succeeds with one of the good
// certificates, and the last good one is served at the end.
func TestRotationUnderLoad(t *testing.T) {
	p := newPKI(t)
	first := p.srvCA.Server(t, "agent")
	f := testpki.WriteFiles(t, t.TempDir(), first, p.cliCA.CertPEM)
	r, err := New(files(f), Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, r.ServerConfig())

	var mu sync.Mutex
	good := map[string]bool{first.Cert.SerialNumber.String(): true}
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				got, err := dial(addr, p.roots, p.client)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ok := good[got.SerialNumber.String()]
				mu.Unlock()
				if !ok {
					errs <- errors.New("served a certificate that was never good: " + got.SerialNumber.String())
					return
				}
			}
		})
	}
	var last testpki.Pair
	for i := range 20 {
		next := p.srvCA.Server(t, "agent")
		if i%3 == 2 {
			testpki.WriteAtomic(t, f.Cert, next.CertPEM) // key not yet written: broken
			time.Sleep(2 * time.Millisecond)
		}
		mu.Lock()
		good[next.Cert.SerialNumber.String()] = true
		mu.Unlock()
		testpki.WriteFiles(t, f.Dir, next, p.cliCA.CertPEM)
		last = next
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	expectSerial(t, addr, p, last)
}

// TestBrokenContentAgainAfterRecovery: broken files, then the good ones
// back, then exactly the same broken files: the second failure is reported
// with its reason too.
func TestBrokenContentAgainAfterRecovery(t *testing.T) {
	p := newPKI(t)
	first := p.srvCA.Server(t, "agent")
	f := testpki.WriteFiles(t, t.TempDir(), first, p.cliCA.CertPEM)
	var log bytes.Buffer
	r, err := New(files(f), Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, r.ServerConfig())
	broken := []byte("-----BEGIN CERTIFICATE-----\n")
	testpki.WriteAtomic(t, f.Cert, broken)
	expectSerial(t, addr, p, first)
	// The good certificate comes back, then exactly the broken files again.
	testpki.WriteAtomic(t, f.Cert, first.CertPEM)
	expectSerial(t, addr, p, first)
	testpki.WriteAtomic(t, f.Cert, broken)
	expectSerial(t, addr, p, first)
	if n := strings.Count(log.String(), "no PEM CERTIFICATE block"); n != 2 {
		t.Fatalf("the broken certificate was reported %d times, want 2:\n%s", n, log.String())
	}
}
