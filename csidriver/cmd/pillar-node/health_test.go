package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/csidriver/identity"
)

// get returns the status code and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func expect(t *testing.T, url string, code int, body string) {
	t.Helper()
	if c, b := get(t, url); c != code || !strings.Contains(b, body) {
		t.Errorf("GET %s = %d %q, want %d with %q", url, c, b, code, body)
	}
}

// The answers follow the Identity service's Probe (the real one, over a
// readiness check the test sets) and, with registration on, the socket
// and kubelet's verdict.
func TestHealthFollowsProbeAndRegistration(t *testing.T) {
	var (
		mu                                  sync.Mutex
		readyErr, servingErr, registeredErr error
	)
	set := func(ready, serving, registered error) {
		mu.Lock()
		defer mu.Unlock()
		readyErr, servingErr, registeredErr = ready, serving, registered
	}
	read := func(e *error) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			return *e
		}
	}
	h := &health{
		identity:   identity.New(func(context.Context) error { return read(&readyErr)() }, false),
		serving:    read(&servingErr),
		registered: read(&registeredErr),
	}
	srv := httptest.NewServer(h.handler())
	defer srv.Close()
	healthz, readyz := srv.URL+"/healthz", srv.URL+"/readyz"

	expect(t, healthz, http.StatusOK, "ok")
	expect(t, readyz, http.StatusOK, "ok")

	set(nil, nil, errors.New("not registered with kubelet yet"))
	expect(t, healthz, http.StatusOK, "ok")
	expect(t, readyz, http.StatusServiceUnavailable, "not registered with kubelet yet")

	set(errors.New("nvme_tcp not loaded (modprobe nvme_tcp)"), nil, errors.New("not registered with kubelet yet"))
	expect(t, healthz, http.StatusServiceUnavailable, "nvme_tcp not loaded")
	expect(t, readyz, http.StatusServiceUnavailable, "nvme_tcp not loaded")

	set(nil, errors.New("registration socket /r/pillar-csi.io-reg.sock: listen: no such file or directory"), nil)
	expect(t, healthz, http.StatusServiceUnavailable, "registration socket")
	expect(t, readyz, http.StatusServiceUnavailable, "registration socket")

	// Registration off: only the probe counts.
	off := httptest.NewServer((&health{identity: h.identity}).handler())
	defer off.Close()
	expect(t, off.URL+"/readyz", http.StatusOK, "ok")

	resp, err := http.Post(healthz, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", resp.StatusCode)
	}
}

// blockingIdentity's Probe ignores its context until released, like a
// check stuck on a hung disk.
type blockingIdentity struct {
	csi.UnimplementedIdentityServer
	release chan struct{}
}

func (b *blockingIdentity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	<-b.release
	return nil, status.Error(codes.FailedPrecondition, "not ready: released")
}

// A probe that does not return is answered with 503 after probeTimeout;
// while it hangs, later requests fail at once instead of piling up
// goroutines; once it returns, probing works again.
func TestHealthBoundsAHangingProbe(t *testing.T) {
	b := &blockingIdentity{release: make(chan struct{})}
	srv := httptest.NewServer((&health{identity: b}).handler())
	defer srv.Close()

	start := time.Now()
	expect(t, srv.URL+"/healthz", http.StatusServiceUnavailable, "no answer within")
	if d := time.Since(start); d < probeTimeout || d > probeTimeout+5*time.Second {
		t.Errorf("answered after %v, want about %v", d, probeTimeout)
	}
	start = time.Now()
	expect(t, srv.URL+"/readyz", http.StatusServiceUnavailable, "earlier probe has not returned")
	if d := time.Since(start); d > time.Second {
		t.Errorf("second request waited %v", d)
	}
	close(b.release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, body := get(t, srv.URL+"/healthz")
		if c == http.StatusServiceUnavailable && strings.Contains(body, "not ready: released") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the probe returned: %d %q", c, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHealthServerHasTimeouts(t *testing.T) {
	s := newHealthServer(http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= probeTimeout || s.IdleTimeout <= 0 {
		t.Errorf("timeouts %v %v %v %v", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout)
	}
}
