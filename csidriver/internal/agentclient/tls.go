package agentclient

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"
)

// Keys of the TLS Secret a PillarAgent references (the layout of a
// kubernetes.io/tls Secret plus the CA, as cert-manager writes it).
const (
	KeyCA   = "ca.crt"
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
)

var errPoolClosed = errors.New("agent connection pool is closed")

// MaterialError says which key of the Secret is missing or unusable.
type MaterialError struct {
	// Key is the Secret key at fault (ca.crt, tls.crt or tls.key).
	Key string
	Err error
}

func (e *MaterialError) Error() string { return fmt.Sprintf("%s: %v", e.Key, e.Err) }
func (e *MaterialError) Unwrap() error { return e.Err }

// ClientTLS builds the mutual-TLS client configuration from a Secret's
// data: the client certificate and key presented to the agent, and the CA
// the agent's certificate must chain to. serverName is the name the
// agent's certificate must carry; when empty the host of address is used.
// It returns the configuration and a digest of the material (Target's
// Material). Material that cannot work (a missing key, no PEM, a key that
// does not match the certificate, an expired certificate) is a
// *MaterialError naming the key.
func ClientTLS(data map[string][]byte, serverName, address string, now time.Time) (*tls.Config, string, error) {
	for _, k := range []string{KeyCA, KeyCert, KeyKey} {
		if len(data[k]) == 0 {
			return nil, "", &MaterialError{Key: k, Err: errors.New("missing or empty")}
		}
	}
	pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return nil, "", &MaterialError{Key: KeyCert + "/" + KeyKey, Err: err}
	}
	if leaf := pair.Leaf; leaf != nil && now.After(leaf.NotAfter) {
		return nil, "", &MaterialError{Key: KeyCert, Err: fmt.Errorf("certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[KeyCA]) {
		return nil, "", &MaterialError{Key: KeyCA, Err: errors.New("no PEM certificate in it")}
	}
	if serverName == "" {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			host = address
		}
		serverName = host
	}
	h := sha256.New()
	for _, k := range []string{KeyCA, KeyCert, KeyKey} {
		fmt.Fprintf(h, "%s\x00%d\x00", k, len(data[k]))
		h.Write(data[k])
	}
	fmt.Fprintf(h, "server-name\x00%s", serverName)
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		RootCAs:      pool,
		ServerName:   serverName,
	}
	return cfg, hex.EncodeToString(h.Sum(nil)), nil
}
