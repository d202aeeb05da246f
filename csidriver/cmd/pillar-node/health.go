package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"
)

// Timeouts of the health endpoint. probeTimeout is shorter than the
// server's write timeout, so a slow probe still gets its 503 written; the
// chart's probes need timeoutSeconds above it (they allow 10 s).
const (
	probeTimeout      = 8 * time.Second
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 10 * time.Second
	idleTimeout       = 60 * time.Second
)

// health serves pillar-node's /healthz and /readyz, in place of the
// livenessprobe sidecar.
//
// /healthz (liveness) is 200 when the Identity service's Probe says ready
// — the check kubelet's CSI calls depend on: initiator modules loaded,
// state directory writable, tools present — and, with registration on,
// while the registration socket is served. A socket that cannot be
// created any more (its hostPath directory removed on the host) is healed
// only by a container restart, which mounts the directory anew.
//
// /readyz (readiness) is /healthz plus "registered with kubelet": kubelet
// answered NotifyRegistrationStatus with registered=true on the current
// registration socket, so kubelet sends this pod CSI calls. A DaemonSet
// rollout waits for it before it replaces the next node's pod.
type health struct {
	identity   csi.IdentityServer
	serving    func() error // nil when registration is off
	registered func() error // nil when registration is off
	inflight   atomic.Bool
}

func (h *health) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { h.respond(w, r, false) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { h.respond(w, r, true) })
	return mux
}

func (h *health) respond(w http.ResponseWriter, r *http.Request, ready bool) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.check(r.Context(), ready); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%v\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (h *health) check(ctx context.Context, ready bool) error {
	if err := h.probe(ctx); err != nil {
		return err
	}
	if h.serving != nil {
		if err := h.serving(); err != nil {
			return err
		}
	}
	if ready && h.registered != nil {
		if err := h.registered(); err != nil {
			return err
		}
	}
	return nil
}

// probe calls the Identity service's Probe, bounded by probeTimeout even
// when the check blocks past its context (a state directory on a hung
// disk): the caller gets its answer, and at most one probe is left
// running.
func (h *health) probe(ctx context.Context) error {
	if !h.inflight.CompareAndSwap(false, true) {
		return errors.New("probe: an earlier probe has not returned yet")
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		resp, err := h.identity.Probe(ctx, &csi.ProbeRequest{})
		if err == nil && resp.GetReady() != nil && !resp.GetReady().GetValue() {
			err = errors.New("not ready")
		}
		// Free before answering: a probe that follows the answer (kubelet's
		// next, or the readiness check after the liveness one) must not
		// find this one still in flight.
		h.inflight.Store(false)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("probe: %s", status.Convert(err).Message())
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("probe: no answer within %v", probeTimeout)
	}
}

// newHealthServer is the HTTP server of the health endpoint, with
// timeouts on every phase of a request.
func newHealthServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    1 << 14,
	}
}
