package agentauth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var (
	tokA = strings.Repeat("a", 40)
	tokB = strings.Repeat("B", 48)
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func incoming(vals ...string) context.Context {
	md := metadata.MD{}
	for _, v := range vals {
		md.Append(MetadataKey, v)
	}
	return metadata.NewIncomingContext(context.Background(), md)
}

// clock is a settable time for the reload tests.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestTokenFileRules(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"short", strings.Repeat("x", MinLength-1), "at least 32"},
		{"empty", "", "a token of 0 bytes"},
		{"space inside", strings.Repeat("x", 20) + " " + strings.Repeat("x", 20), "printable ASCII"},
		{"non-ASCII", strings.Repeat("é", 20), "printable ASCII"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "token")
			write(t, p, tc.content)
			_, err := NewClientToken(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewClientToken: %v, want an error saying %q", err, tc.want)
			}
			_, err = NewAccepted(filepath.Dir(p))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewAccepted: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := NewClientToken(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	if _, err := NewAccepted(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Errorf("empty directory: %v, want \"no token\"", err)
	}
}

func TestClientTokenSendsAndReloads(t *testing.T) {
	p := filepath.Join(t.TempDir(), ClientKey)
	write(t, p, tokA+"\n") // echo's newline is not part of it
	c, err := NewClientToken(p)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{time.Now()}
	c.now = clk.now
	md, err := c.GetRequestMetadata(context.Background())
	if err != nil || md[MetadataKey] != "Bearer "+tokA {
		t.Fatalf("metadata %v, %v; want Bearer %s", md, err, tokA)
	}
	if c.RequireTransportSecurity() {
		t.Error("the token must also travel on plaintext connections, the default transport")
	}
	write(t, p, tokB)
	if got := c.Token(); got != tokA {
		t.Errorf("re-read before ReloadInterval: %q", got)
	}
	clk.t = clk.t.Add(ReloadInterval)
	if got := c.Token(); got != tokB {
		t.Errorf("after ReloadInterval: %q, want the rotated token", got)
	}
	// A broken file keeps the last token, and says why.
	write(t, p, "short")
	clk.t = clk.t.Add(ReloadInterval)
	if got := c.Token(); got != tokB {
		t.Errorf("after a bad re-read: %q, want the last good token", got)
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "at least") {
		t.Errorf("Err after a bad re-read: %v", err)
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, ClientKey), tokA)
	write(t, filepath.Join(dir, ".hidden"), "not a token") // the kubelet's own entries
	if err := os.Mkdir(filepath.Join(dir, "..data"), 0o700); err != nil {
		t.Fatal(err)
	}
	a, err := NewAccepted(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"the token", incoming("Bearer " + tokA), nil},
		{"no metadata", context.Background(), ErrMissing},
		{"empty bearer", incoming("Bearer "), ErrMissing},
		{"no scheme", incoming(tokA), ErrMissing},
		{"two values", incoming("Bearer "+tokA, "Bearer "+tokA), ErrMissing},
		{"another token", incoming("Bearer " + tokB), ErrWrong},
		{"a prefix of it", incoming("Bearer " + tokA[:MinLength]), ErrWrong},
		{"it and more", incoming("Bearer " + tokA + "x"), ErrWrong},
	} {
		if err := a.Verify(tc.ctx); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	st, _ := status.FromError(Refusal(ErrWrong))
	if st.Code() != codes.Unauthenticated || strings.Contains(st.Message(), tokA) {
		t.Errorf("refusal %v: want Unauthenticated that names no token", st)
	}
}

// Rotation as docs/install.md describes it: add, swap, remove, with every
// step accepted by an agent whose view is one step behind.
func TestAcceptedRotation(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, ClientKey), tokA)
	a, err := NewAccepted(dir)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{time.Now()}
	a.now = clk.now
	reload := func() { clk.t = clk.t.Add(ReloadInterval) }
	accepts := func(tok string) bool { return a.Verify(incoming("Bearer "+tok)) == nil }

	write(t, filepath.Join(dir, "next"), tokB)
	if accepts(tokB) {
		t.Error("a new token accepted before ReloadInterval")
	}
	reload()
	if !accepts(tokA) || !accepts(tokB) || a.Count() != 2 {
		t.Fatalf("after adding: accepts A %v, B %v, count %d; want both", accepts(tokA), accepts(tokB), a.Count())
	}
	write(t, filepath.Join(dir, ClientKey), tokB)
	write(t, filepath.Join(dir, "next"), tokA)
	reload()
	if !accepts(tokA) || !accepts(tokB) {
		t.Fatal("after the swap both must still be accepted")
	}
	if err := os.Remove(filepath.Join(dir, "next")); err != nil {
		t.Fatal(err)
	}
	reload()
	if accepts(tokA) || !accepts(tokB) {
		t.Errorf("after removing the old token: accepts A %v, B %v; want only B", accepts(tokA), accepts(tokB))
	}
	// A broken rotation keeps what was accepted, and says why.
	write(t, filepath.Join(dir, "next"), "short")
	reload()
	if !accepts(tokB) || a.Err() == nil {
		t.Errorf("after a bad file: accepts B %v, Err %v; want B kept and the error reported", accepts(tokB), a.Err())
	}
}

func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ClientKey), []byte(tokA), 0o600); err != nil {
		b.Fatal(err)
	}
	a, err := NewAccepted(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx := incoming("Bearer " + tokA)
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Verify(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
