package controllerapp_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
)

// healthOf fetches path?verbose from a replica's health endpoint.
func healthOf(r *replica, path string) (int, string, error) {
	resp, err := http.Get("http://" + r.health + path + "?verbose")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestHealthChecksProbeTheCSIEndpoint runs pillar-controller as a
// follower on the suite's Lease: its /healthz and /readyz include a csi
// check that calls Probe through its CSI endpoint, which a follower
// passes; once the endpoint no longer answers, both fail.
func TestHealthChecksProbeTheCSIEndpoint(t *testing.T) {
	r := startReplica(t, buildController(t), "health", leaseID)
	for _, path := range []string{"/healthz", "/readyz"} {
		eventually(t, quick, func() error {
			code, body, err := healthOf(r, path)
			if err != nil {
				return err
			}
			if code != http.StatusOK || !strings.Contains(body, "[+]csi ok") {
				return fmt.Errorf("%s = %d\n%s", path, code, body)
			}
			return nil
		})
	}
	if r.leading() {
		t.Fatal("the replica leads the suite's Lease; it should be a follower")
	}
	// The endpoint's socket is gone: the CSI sidecars cannot reach the
	// service any more, and neither can the probe.
	if err := os.Remove(r.csiSock); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body, err := healthOf(r, path)
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusOK || !strings.Contains(body, "[-]csi failed") {
			t.Errorf("%s with the CSI socket gone = %d\n%s", path, code, body)
		}
	}
	if !strings.Contains(r.log.String(), `"msg":"health check failed","check":"csi"`) {
		t.Errorf("the failure's reason is not logged")
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-r.done
	r.done <- err // for the cleanup
	if err != nil {
		t.Errorf("replica after SIGTERM: %v, want exit status 0", err)
	}
}
