package controllerapp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"

	"github.com/pillar-csi/pillar-csi/api/syncbuf"
)

// replica is one pillar-controller process.
type replica struct {
	name    string
	cmd     *exec.Cmd
	log     *syncbuf.Buffer
	metrics string // URL of /metrics
	ready   string // URL of /readyz
	health  string // host:port of /healthz and /readyz
	csiSock string // its CSI endpoint's socket
	done    chan error
}

// buildController builds the pillar-controller binary, as the Makefile
// does.
func buildController(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pillar-controller")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/pillar-controller").CombinedOutput()
	if err != nil {
		t.Fatalf("go build pillar-controller: %v\n%s", err, out)
	}
	return bin
}

func startReplica(t *testing.T, bin, name, lease string) *replica {
	t.Helper()
	maddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	haddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, log: &syncbuf.Buffer{}, metrics: "http://" + maddr + "/metrics", ready: "http://" + haddr + "/readyz",
		health: haddr, csiSock: filepath.Join(t.TempDir(), "csi.sock"), done: make(chan error, 1)}
	r.cmd = exec.Command(bin, "-namespace", namespace, "-leader-election-id", lease,
		"-lease-duration", "3s", "-renew-deadline", "2s", "-retry-period", "250ms",
		"-metrics-address", maddr, "-health-address", haddr, "-shutdown-grace-period", "5s", "-log-level", "debug",
		"-csi-endpoint", "unix://"+r.csiSock)
	r.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAMESPACE=")
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		<-r.done
		if t.Failed() {
			t.Logf("---- replica %s log ----\n%s", r.name, r.log.String())
		}
	})
	return r
}

// metric reads one sample of /metrics: the sum of the series whose name
// and labels start with prefix. A replica that has not run a controller
// has no such series (0).
func (r *replica) metric(prefix string) (float64, error) {
	resp, err := http.Get(r.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func (r *replica) leading() bool {
	v, err := r.metric("leader_election_master_status{")
	return err == nil && v == 1
}

func (r *replica) reconciles() float64 {
	v, _ := r.metric(`controller_runtime_reconcile_total{controller="pillarprotocol"`)
	return v
}

func (r *replica) isReady() bool {
	resp, err := http.Get(r.ready)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestLeaderElection runs three pillar-controller processes on one Lease:
// only the leader reconciles; a leader stopped with SIGTERM hands over at
// once; a leader that is frozen past its renew deadline loses the Lease to
// a follower and, when it runs again, exits instead of acting.
func TestLeaderElection(t *testing.T) {
	bin := buildController(t)
	lease := fmt.Sprintf("pillar-le-%d", time.Now().UnixNano())

	a := startReplica(t, bin, "a", lease)
	eventually(t, 30*time.Second, func() error {
		if !a.leading() {
			return errors.New("replica a is not leading")
		}
		return nil
	})
	b := startReplica(t, bin, "b", lease)
	eventually(t, 30*time.Second, func() error {
		if !b.isReady() {
			return errors.New("replica b is not ready (caches not synced)")
		}
		return nil
	})

	// Work arrives: only the leader does it.
	p1 := protocolObj("le-proto-1", "192.0.2.1")
	mustCreate(t, p1)
	waitReady(t, p1, metav1.ConditionTrue, v1alpha1.ReasonProtocolAccepted, quick)
	eventually(t, quick, func() error {
		if a.reconciles() == 0 {
			return errors.New("the leader has not reconciled le-proto-1")
		}
		return nil
	})
	time.Sleep(time.Second)
	if b.leading() || b.reconciles() != 0 {
		t.Fatalf("follower b leads (%v) or reconciled (%v times)", b.leading(), b.reconciles())
	}

	// SIGTERM: a releases the Lease; b takes over without waiting for it to
	// expire.
	start := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.done:
		a.done <- err
		if err != nil {
			t.Errorf("replica a after SIGTERM: %v, want exit status 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("replica a did not exit within 15s of SIGTERM")
	}
	eventually(t, 10*time.Second, func() error {
		if !b.leading() {
			return errors.New("replica b has not taken over")
		}
		return nil
	})
	t.Logf("handover after SIGTERM: %v", time.Since(start).Round(10*time.Millisecond))
	p2 := protocolObj("le-proto-2", "192.0.2.2")
	mustCreate(t, p2)
	eventually(t, quick, func() error {
		if b.reconciles() == 0 {
			return errors.New("the new leader b has not reconciled")
		}
		return nil
	})

	// b freezes (SIGSTOP) past its renew deadline: c takes the Lease once
	// it expires; b, thawed, finds it lost and exits with an error.
	c := startReplica(t, bin, "c", lease)
	eventually(t, 30*time.Second, func() error {
		if !c.isReady() {
			return errors.New("replica c is not ready")
		}
		return nil
	})
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	eventually(t, 20*time.Second, func() error {
		if !c.leading() {
			return errors.New("replica c has not taken over from the frozen leader")
		}
		return nil
	})
	t.Logf("takeover from a frozen leader: %v", time.Since(start).Round(10*time.Millisecond))
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-b.done:
		b.done <- err
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("thawed replica b: %v, want exit status 1", err)
		}
		if !regexp.MustCompile(`leader election lost`).MatchString(b.log.String()) {
			t.Errorf("replica b's log does not say the election was lost")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the thawed former leader b is still running 15s after it lost the Lease")
	}

	deleteAndWait(t, p1, p2)
}
