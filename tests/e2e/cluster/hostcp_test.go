package cluster

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The guest issues its node's certificates with the CA the host wrote;
// the API server on the host must accept them.
func TestLoadCAIssuesForTheSameCA(t *testing.T) {
	orig, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := orig.writeCA(dir); err != nil {
		t.Fatal(err)
	}
	loaded, err := loadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := loaded.issue("system:node:n1", []string{"system:nodes"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(kp.cert)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(orig.pem)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("a certificate of the loaded CA does not verify against the original: %v", err)
	}
	other, err := loaded.issue("system:node:n1", []string{"system:nodes"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ob, _ := pem.Decode(other.cert)
	oc, _ := x509.ParseCertificate(ob.Bytes)
	if oc.SerialNumber.Cmp(cert.SerialNumber) == 0 {
		t.Errorf("two certificates share serial %v", cert.SerialNumber)
	}
	if _, err := loadCA(t.TempDir()); err == nil {
		t.Error("loadCA of an empty directory: no error")
	}
}

// The proxy through which the host's API server reaches the kubelets
// tunnels a CONNECT for a client of the cluster's CA, and nothing for a
// client without one.
func TestEgressProxy(t *testing.T) {
	ca, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: Options{Log: io.Discard}, ca: ca}
	srv, addr, err := c.serveEgressProxy("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	// The "kubelet": echoes a line.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			conn, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				line, _ := bufio.NewReader(conn).ReadString('\n')
				io.WriteString(conn, "echo "+line)
			}()
		}
	}()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	kp, err := ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.cert, kp.key)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(t *testing.T, certs []tls.Certificate) (*tls.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr.String(), &tls.Config{RootCAs: pool, Certificates: certs, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		return conn, bufio.NewReader(conn)
	}

	t.Run("CONNECT tunnels", func(t *testing.T) {
		conn, r := dial(t, []tls.Certificate{cert})
		io.WriteString(conn, "CONNECT "+echo.Addr().String()+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		io.WriteString(conn, "hello\n")
		got, err := r.ReadString('\n')
		if err != nil || got != "echo hello\n" {
			t.Errorf("through the tunnel: %q, %v; want %q", got, err, "echo hello\n")
		}
	})
	t.Run("other methods refused", func(t *testing.T) {
		conn, r := dial(t, []tls.Certificate{cert})
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("GET: %s, want 405", resp.Status)
		}
	})
	t.Run("unreachable target", func(t *testing.T) {
		conn, r := dial(t, []tls.Certificate{cert})
		io.WriteString(conn, "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("CONNECT to a closed port: %s, want 502", resp.Status)
		}
	})
	t.Run("a client without a certificate is refused", func(t *testing.T) {
		conn, r := dial(t, nil)
		io.WriteString(conn, "CONNECT "+echo.Addr().String()+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err == nil {
			t.Fatalf("CONNECT without a client certificate answered %s", resp.Status)
		}
		if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("refusal: %v, want a certificate error", err)
		}
	})
}
