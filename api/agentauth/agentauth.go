// Package agentauth is the credential of the agent API: a bearer token
// that pillar-controller sends with every call and pillar-agent checks
// before it does anything.
//
// One token serves one installation. The Helm chart generates it into a
// Secret; pillar-agent mounts the whole Secret as a directory and accepts
// every key in it (Accepted), pillar-controller reads the key "token" and
// sends it (ClientToken). Both re-read their files within ReloadInterval,
// so a token is rotated without a restart and without a refused call:
//
//  1. add the new token to the Secret under a second key: every agent
//     accepts both;
//  2. once the agents have it, put the new token under "token" and the
//     old one under the second key: the controllers send the new one;
//  3. once the controllers have it, remove the second key.
//
// The token travels as call metadata ("authorization: Bearer <token>"),
// in plaintext unless the connection uses mutual TLS: it keeps strangers
// off the API, and the storage network must still be kept away from
// tenants (SECURITY.md).
package agentauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	// MetadataKey is the call metadata that carries the token.
	MetadataKey = "authorization"
	// scheme prefixes the token in MetadataKey's value.
	scheme = "Bearer "
	// ClientKey is the key of the Secret (and so the file name in its
	// mounted directory) whose token pillar-controller sends.
	ClientKey = "token"
	// MinLength is the shortest token accepted, in bytes: the chart
	// generates 48 random letters and digits (about 285 bits).
	MinLength = 32
	// ReloadInterval is how long a token file read stays in use before
	// it is read again: a rotated Secret takes effect within the kubelet's
	// sync of the Secret volume plus this.
	ReloadInterval = 10 * time.Second
)

// check says what is wrong with a token read from name, or nil.
func check(name string, tok []byte) error {
	if len(tok) < MinLength {
		return fmt.Errorf("%s: a token of %d bytes; at least %d are required", name, len(tok), MinLength)
	}
	for _, c := range tok {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%s: a token may hold only printable ASCII without spaces", name)
		}
	}
	return nil
}

// readToken reads one token file; surrounding whitespace (a trailing
// newline from echo) is not part of the token.
func readToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tok := []byte(strings.TrimSpace(string(b)))
	if err := check(path, tok); err != nil {
		return nil, err
	}
	return tok, nil
}

// ClientToken is the token pillar-controller sends, read from a file. It
// implements credentials.PerRPCCredentials, so a gRPC connection made with
// it (grpc.WithPerRPCCredentials) sends the token with every call.
type ClientToken struct {
	path  string
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	tok  string
	read time.Time
	err  error // of the last read, when it failed
}

// NewClientToken reads the token in path; a file that is missing, empty
// or too short is an error now rather than a refusal on every call.
func NewClientToken(path string) (*ClientToken, error) {
	tok, err := readToken(path)
	if err != nil {
		return nil, fmt.Errorf("agent token: %w", err)
	}
	return &ClientToken{path: path, every: ReloadInterval, now: time.Now, tok: string(tok), read: time.Now()}, nil
}

// Token returns the token, re-reading the file when the last read is
// older than ReloadInterval. A failed re-read keeps the token read last
// (a Secret volume is replaced atomically, so a failure is a transient
// error or an operator's mistake) and is reported by Err.
func (c *ClientToken) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); now.Sub(c.read) >= c.every {
		c.read = now
		tok, err := readToken(c.path)
		c.err = err
		if err == nil {
			c.tok = string(tok)
		}
	}
	return c.tok
}

// Err is the error of the last re-read, nil when it succeeded.
func (c *ClientToken) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c *ClientToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{MetadataKey: scheme + c.Token()}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// token is sent on plaintext connections too, the documented default.
func (c *ClientToken) RequireTransportSecurity() bool { return false }

// Bearer sends tok with every call, as it is: for tools and tests that
// hold a token rather than a file (and for those that prove a wrong one is
// refused).
func Bearer(tok string) credentials.PerRPCCredentials { return bearer(tok) }

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{MetadataKey: scheme + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// Accepted is the set of tokens pillar-agent accepts: the content of every
// file in a directory (a mounted Secret, one file per key; names that
// start with "." are the kubelet's own and are skipped).
type Accepted struct {
	dir   string
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	hashes [][sha256.Size]byte
	read   time.Time
	err    error
}

// NewAccepted reads the tokens in dir; a directory without a usable token
// is an error.
func NewAccepted(dir string) (*Accepted, error) {
	a := &Accepted{dir: dir, every: ReloadInterval, now: time.Now}
	hashes, err := readDir(dir)
	if err != nil {
		return nil, fmt.Errorf("agent tokens: %w", err)
	}
	a.hashes, a.read = hashes, a.now()
	return a, nil
}

// readDir reads every token of dir. Any file that is not a usable token
// fails the read: a half-written rotation is an error, not a narrower set.
func readDir(dir string) ([][sha256.Size]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var hashes [][sha256.Size]byte
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue // a directory or a dangling link is no key
		}
		tok, err := readToken(p)
		if err != nil {
			return nil, err
		}
		hashes = append(hashes, sha256.Sum256(tok))
	}
	if len(hashes) == 0 {
		return nil, fmt.Errorf("%s: no token in it", dir)
	}
	return hashes, nil
}

// Err is the error of the last re-read, nil when it succeeded; until a
// re-read succeeds the tokens read before stay accepted.
func (a *Accepted) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Count is how many tokens are accepted now.
func (a *Accepted) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.hashes)
}

// current returns the accepted hashes, re-reading the directory when the
// last read is older than ReloadInterval.
func (a *Accepted) current() [][sha256.Size]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now := a.now(); now.Sub(a.read) >= a.every {
		a.read = now
		hashes, err := readDir(a.dir)
		a.err = err
		if err == nil {
			a.hashes = hashes
		}
	}
	return a.hashes
}

// ErrMissing and ErrWrong are why a call is refused.
var (
	ErrMissing = errors.New("the call carries no agent token")
	ErrWrong   = errors.New("the call's agent token is not one this agent accepts")
)

// Verify checks the token in ctx's incoming metadata against every
// accepted token. The comparison takes the same time whichever token
// matches and however much of a wrong one does: both sides are hashed
// first, and every accepted hash is compared.
func (a *Accepted) Verify(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	if len(vals) != 1 {
		return ErrMissing
	}
	tok, ok := strings.CutPrefix(vals[0], scheme)
	if !ok || tok == "" {
		return ErrMissing
	}
	got := sha256.Sum256([]byte(tok))
	match := 0
	for _, h := range a.current() {
		match |= subtle.ConstantTimeCompare(got[:], h[:])
	}
	if match != 1 {
		return ErrWrong
	}
	return nil
}

// Refusal is the status a refused call is answered with. It says what the
// caller must send, and nothing about the tokens accepted.
func Refusal(err error) error {
	return status.Errorf(codes.Unauthenticated, "pillar-agent: %v: every call but health must carry %q metadata \"%s<token>\" "+
		"with the installation's token (pillar-controller sends it from -agent-token-file)", err, MetadataKey, scheme)
}
