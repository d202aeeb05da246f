package tlsconfig

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Files names the PEM files of a server's TLS identity and of the CA its
// clients must chain to.
type Files struct {
	// CertFile holds the server certificate, followed by any intermediates.
	CertFile string
	// KeyFile holds the private key of the server certificate.
	KeyFile string
	// CAFile holds one or more CA certificates; a client certificate must
	// chain to one of them.
	CAFile string
}

// Missing names the files that are not set, as flag-style names
// ("cert", "key", "ca"), so a caller can say exactly what is missing when
// some but not all are given.
func (f Files) Missing() []string {
	var m []string
	if f.CertFile == "" {
		m = append(m, "cert")
	}
	if f.KeyFile == "" {
		m = append(m, "key")
	}
	if f.CAFile == "" {
		m = append(m, "ca")
	}
	return m
}

// DefaultRecheckInterval is how often the files are read and hashed even
// when their size, mtime and inode look unchanged. It covers an in-place
// rewrite of equal size within the filesystem's timestamp granularity,
// which a stat alone cannot see.
const DefaultRecheckInterval = time.Minute

// maxFileSize bounds what is read from each file: a CA bundle is a few
// hundred KiB at most, and a path pointing at something huge is a mistake.
const maxFileSize = 4 << 20

// Options tune a Reloader. The zero value is usable.
type Options struct {
	// Logger receives one record per successful reload and one per new
	// failure. Nil discards.
	Logger *slog.Logger
	// Now is the clock certificates are checked against. Nil means
	// time.Now.
	Now func() time.Time
	// RecheckInterval overrides DefaultRecheckInterval.
	RecheckInterval time.Duration
	// ClientName, when set, is the identity a client certificate must
	// carry besides chaining to the CA: its subject common name or one of
	// its DNS names. A certificate of the same CA issued to anything else
	// (another component, a tenant's workload) is refused in the
	// handshake. Empty accepts every certificate of the CA.
	ClientName string
}

// Reloader serves a server's TLS material from files that may be replaced
// while the server runs. Its ServerConfig looks at the files before every
// handshake and uses what they hold now; material that fails to load
// never replaces the last good material. It is safe for concurrent use.
type Reloader struct {
	files   Files
	logger  *slog.Logger
	now     func() time.Time
	recheck time.Duration
	// clientName is Options.ClientName.
	clientName string

	// cur is read lock-free on every handshake.
	cur atomic.Pointer[material]

	mu          sync.Mutex // serializes loads; guards the fields below
	failedHash  [sha256.Size]byte
	failedStamp stamp
	failedErr   string
	reloads     uint64
	failures    uint64
}

// material is one good, immutable set of TLS material.
type material struct {
	config    *tls.Config
	leaf      *x509.Certificate
	hash      [sha256.Size]byte
	stamp     stamp
	checkedAt time.Time
}

// stamp is what a stat of the three files says; a change means "look
// again". The kubelet's `..data` symlink swap shows up as a new inode,
// because os.Stat follows the symlinks to the files of the new snapshot.
type stamp [3]fileStamp

type fileStamp struct {
	size     int64
	mtime    int64
	dev, ino uint64
	err      string
}

// New loads and checks the material in files and returns a Reloader
// serving it. Unreadable files, files without PEM data, a key that does
// not match the certificate, an expired certificate and a CA file without
// certificates are errors (an *Error) naming the file.
func New(files Files, opts Options) (*Reloader, error) {
	if m := files.Missing(); len(m) > 0 {
		return nil, &Error{Op: "configure", Path: strings.Join(m, ","), Err: errors.New("certificate, key and CA files are all required")}
	}
	r := &Reloader{files: files, logger: opts.Logger, now: opts.Now, recheck: opts.RecheckInterval, clientName: opts.ClientName}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.recheck <= 0 {
		r.recheck = DefaultRecheckInterval
	}
	st := r.stat()
	raw, hash, err := r.read()
	if err != nil {
		return nil, err
	}
	m, err := r.build(raw)
	if err != nil {
		return nil, err
	}
	m.hash, m.stamp, m.checkedAt = hash, st, r.now()
	r.cur.Store(m)
	return r, nil
}

// ServerConfig returns the configuration to hand to the TLS server (for
// gRPC, credentials.NewTLS). Every handshake gets the material the files
// hold at that moment; client certificates are required and verified
// against the CA file, and must carry Options.ClientName when it is set
// (a refusal is logged with the peer's address); TLS 1.2 is the minimum (Go negotiates 1.3 whenever
// the client offers it).
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c := r.config()
			if r.clientName == "" {
				return c, nil
			}
			// The check of the client's name, with the peer's address for
			// the log of a refusal.
			c = c.Clone()
			peer := "unknown"
			if hello.Conn != nil {
				peer = hello.Conn.RemoteAddr().String()
			}
			c.VerifyConnection = func(cs tls.ConnectionState) error {
				err := r.checkClientName(cs)
				if err != nil {
					r.logger.Warn("TLS client refused", "peer", peer, "error", err)
				}
				return err
			}
			return c, nil
		},
	}
}

// Leaf returns the server certificate being served now.
func (r *Reloader) Leaf() *x509.Certificate { return r.cur.Load().leaf }

// Counts reports how many times new material was loaded after New, and
// how many attempts failed and kept the previous material.
func (r *Reloader) Counts() (reloads, failures uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloads, r.failures
}

// config is the per-handshake path: three stats and a comparison when
// nothing changed.
func (r *Reloader) config() *tls.Config {
	m := r.cur.Load()
	st := r.stat()
	if st == m.stamp && r.now().Sub(m.checkedAt) < r.recheck {
		return m.config
	}
	return r.reload(st).config
}

// reload reads the files and, if they hold new, valid material, makes it
// current. It returns the material to serve either way.
func (r *Reloader) reload(st stamp) *material {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.cur.Load()
	if st == m.stamp && r.now().Sub(m.checkedAt) < r.recheck {
		return m // another handshake reloaded while this one waited
	}
	if st == r.failedStamp && r.failedErr != "" && r.now().Sub(m.checkedAt) < r.recheck {
		return m // the same broken files as last time: already reported
	}
	raw, hash, err := r.read()
	if err == nil && hash == m.hash {
		next := *m
		next.stamp, next.checkedAt = st, r.now()
		r.cur.Store(&next)
		r.failedErr, r.failedStamp, r.failedHash = "", stamp{}, [sha256.Size]byte{}
		return &next
	}
	if err == nil && hash == r.failedHash {
		err = errors.New(r.failedErr)
	} else if err == nil {
		var nm *material
		if nm, err = r.build(raw); err == nil {
			nm.hash, nm.stamp, nm.checkedAt = hash, st, r.now()
			r.cur.Store(nm)
			r.failedErr, r.failedStamp, r.failedHash = "", stamp{}, [sha256.Size]byte{}
			r.reloads++
			r.logger.Info("loaded rotated TLS material",
				"cert_file", r.files.CertFile, "ca_file", r.files.CAFile,
				"serial", nm.leaf.SerialNumber.String(), "not_after", nm.leaf.NotAfter)
			return nm
		}
		r.failedHash = hash
	}
	// Keep serving the last good material. Report each distinct failure
	// once: a rotation caught half-written fails until the writer is done,
	// and handshakes in between must not flood the log.
	if msg := err.Error(); msg != r.failedErr || st != r.failedStamp {
		r.failures++
		r.logger.Error("rotated TLS material not loaded; still serving the previous certificate",
			"error", msg, "serial", m.leaf.SerialNumber.String(), "not_after", m.leaf.NotAfter)
	}
	r.failedErr, r.failedStamp = err.Error(), st
	// Re-arm the periodic check from now, so broken files are read again
	// after the recheck interval and not on every handshake.
	next := *m
	next.checkedAt = r.now()
	r.cur.Store(&next)
	return &next
}

func (r *Reloader) stat() stamp {
	var st stamp
	for i, p := range []string{r.files.CertFile, r.files.KeyFile, r.files.CAFile} {
		fi, err := os.Stat(p)
		if err != nil {
			st[i].err = err.Error()
			continue
		}
		st[i].size, st[i].mtime = fi.Size(), fi.ModTime().UnixNano()
		st[i].dev, st[i].ino = inode(fi)
	}
	return st
}

type rawFiles struct{ cert, key, ca []byte }

func (r *Reloader) read() (rawFiles, [sha256.Size]byte, error) {
	var raw rawFiles
	h := sha256.New()
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{r.files.CertFile, &raw.cert}, {r.files.KeyFile, &raw.key}, {r.files.CAFile, &raw.ca}} {
		b, err := readFile(f.path)
		if err != nil {
			return rawFiles{}, [sha256.Size]byte{}, err
		}
		*f.dst = b
		// Length-prefix each file so that moving bytes between files
		// changes the hash.
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return raw, sum, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		// The *PathError repeats the path the Error already carries.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &Error{Op: "read", Path: path, Err: err}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, &Error{Op: "read", Path: path, Err: err}
	}
	if len(b) > maxFileSize {
		return nil, &Error{Op: "read", Path: path, Err: fmt.Errorf("larger than %d bytes", maxFileSize)}
	}
	return b, nil
}

// build parses and checks raw material; it never looks at the files.
func (r *Reloader) build(raw rawFiles) (*material, error) {
	if !hasPEM(raw.cert, "CERTIFICATE") {
		return nil, &Error{Op: "parse", Path: r.files.CertFile, Err: errors.New("no PEM CERTIFICATE block")}
	}
	if !hasPEM(raw.key, "PRIVATE KEY") {
		return nil, &Error{Op: "parse", Path: r.files.KeyFile, Err: errors.New("no PEM private key block")}
	}
	cert, err := tls.X509KeyPair(raw.cert, raw.key)
	if err != nil {
		return nil, &Error{Op: "parse", Path: r.files.CertFile + "," + r.files.KeyFile, Err: err}
	}
	leaf := cert.Leaf // set by X509KeyPair since Go 1.23
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, &Error{Op: "parse", Path: r.files.CertFile, Err: err}
		}
	}
	if now := r.now(); now.After(leaf.NotAfter) {
		return nil, &Error{Op: "check", Path: r.files.CertFile,
			Err: fmt.Errorf("certificate %q expired at %s", leaf.Subject, leaf.NotAfter.UTC().Format(time.RFC3339))}
	} else if now.Before(leaf.NotBefore) {
		// Not an error: a certificate issued by a host whose clock runs a
		// little ahead becomes valid on its own, and refusing it here would
		// keep the old one until the files change again.
		r.logger.Warn("TLS certificate is not valid yet", "cert_file", r.files.CertFile,
			"not_before", leaf.NotBefore)
	}
	pool, err := parseCAs(raw.ca)
	if err != nil {
		return nil, &Error{Op: "parse", Path: r.files.CAFile, Err: err}
	}
	return &material{
		leaf: leaf,
		config: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			// gRPC requires ALPN "h2"; credentials.NewTLS adds it to the
			// base config, but the config returned per client replaces
			// that one.
			NextProtos: []string{"h2"},
			// A resumed session skips certificate verification. Without
			// tickets, every new connection is verified against the CA
			// bundle the files hold now, so a rotated-out CA or client
			// certificate stops working at once. The controller keeps
			// long-lived connections; full handshakes are rare.
			SessionTicketsDisabled: true,
		},
	}, nil
}

// checkClientName refuses a verified client certificate that does not
// carry the configured client name (none configured: every one passes).
func (r *Reloader) checkClientName(cs tls.ConnectionState) error {
	if r.clientName == "" {
		return nil
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: no client certificate")
	}
	if leaf := cs.PeerCertificates[0]; !carriesName(leaf, r.clientName) {
		return fmt.Errorf("tls: client certificate %q (DNS names %v) is not %q's: the agent accepts only that client", leaf.Subject.CommonName, leaf.DNSNames, r.clientName)
	}
	return nil
}

// carriesName reports whether cert names name in its subject common name
// or its DNS names.
func carriesName(cert *x509.Certificate, name string) bool {
	if cert.Subject.CommonName == name {
		return true
	}
	for _, n := range cert.DNSNames {
		if n == name {
			return true
		}
	}
	return false
}

func hasPEM(b []byte, typeSuffix string) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if strings.HasSuffix(blk.Type, typeSuffix) {
			return true
		}
	}
}

// parseCAs parses every CERTIFICATE block. Unlike
// x509.CertPool.AppendCertsFromPEM it reports a block that does not parse
// instead of skipping it, and an empty bundle is an error: a pool without
// certificates would refuse every client.
func parseCAs(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for len(bytes.TrimSpace(b)) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM CERTIFICATE block: the CA file holds no certificates")
	}
	return pool, nil
}
