package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"

	"github.com/pillar-csi/pillar-csi/agent/internal/testpki"
	"github.com/pillar-csi/pillar-csi/fencing"
)

// The tests run this test binary as pillar-agent: with the variable set it
// runs main with the arguments it was given, exactly as the built binary
// would.
const runMainEnv = "PILLAR_AGENT_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// agentCmd returns a command running pillar-agent with args.
func agentCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "NODE_NAME=")
	return cmd
}

func runAgent(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := agentCmd(ctx, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

func TestHelp(t *testing.T) {
	out, _, code := runAgent(t, "-h")
	if code != 0 {
		t.Fatalf("-h exited %d, want 0", code)
	}
	for _, f := range []string{"-listen-address", "-node-name", "-generations-dir", "-configfs-root", "-metrics-address",
		"-log-level", "-log-format", "-tls-cert-file", "-tls-key-file", "-tls-ca-file", "-shutdown-grace-period",
		"-command-timeout", "-readiness-interval", "-host-root", "-lvm-reject", "-version", "-token-dir", "-allow-unauthenticated"} {
		if !strings.Contains(out, "\n  "+f+" ") && !strings.Contains(out, "\n  "+f+"\n") {
			t.Errorf("-h output lacks %s:\n%s", f, out)
		}
	}
}

// TestVersion: -version prints the version and needs no other flag, so an
// image check can run the binary with nothing else.
func TestVersion(t *testing.T) {
	out, stderr, code := runAgent(t, "-version")
	if code != 0 || !strings.HasPrefix(out, "pillar-agent ") || strings.TrimSpace(out) == "pillar-agent" {
		t.Fatalf("-version: exit %d, stdout %q, stderr %q; want exit 0 and \"pillar-agent <version>\"", code, out, stderr)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-node-name", "n", "-tls-cert-file", "/etc/tls.crt"}, 2, "pillar-agent: -tls-cert-file, -tls-key-file and -tls-ca-file go together: -tls-key-file and -tls-ca-file missing"},
		{[]string{"-node-name", "n", "-shutdown-grace-period", "later"}, 2, `invalid value "later" for flag -shutdown-grace-period`},
		{[]string{}, 2, "-node-name: required (or set $NODE_NAME)"},
		{[]string{"-node-name", "n"}, 2, "-token-dir: required without mutual TLS"},
	} {
		_, stderr, code := runAgent(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("pillar-agent %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

func TestBadTLSFileStopsStartup(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("not PEM"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, stderr, code := runAgent(t, "-node-name", "n", "-listen-address", "127.0.0.1:0", "-metrics-address", "",
		"-generations-dir", filepath.Join(dir, "gen"),
		"-tls-cert-file", filepath.Join(dir, "tls.crt"), "-tls-key-file", filepath.Join(dir, "tls.key"), "-tls-ca-file", filepath.Join(dir, "ca.crt"))
	want := "pillar-agent: mutual TLS: parse " + filepath.Join(dir, "tls.crt") + ": no PEM CERTIFICATE block"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "gen")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the fencing directory was created despite bad TLS material: %v", err)
	}
}

// started is a running pillar-agent.
type started struct {
	cmd   *exec.Cmd
	addr  string
	token string      // the one token in its -token-dir
	logs  chan string // all of stderr, once the process has exited
}

// withToken sends the agent's token with every call, as pillar-controller
// does.
func (a *started) withToken(t *testing.T) grpc.DialOption {
	t.Helper()
	p := filepath.Join(t.TempDir(), agentauth.ClientKey)
	if err := os.WriteFile(p, []byte(a.token), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := agentauth.NewClientToken(p)
	if err != nil {
		t.Fatal(err)
	}
	return grpc.WithPerRPCCredentials(c)
}

// startAgent runs the real agent (server.New with a fencing directory and a
// configfs root that has an nvmet tree but no kernel behind it) and waits
// until it serves.
func startAgent(t *testing.T, ctx context.Context, extra ...string) *started {
	t.Helper()
	dir := t.TempDir()
	cfs := filepath.Join(dir, "configfs")
	for _, d := range []string{"subsystems", "ports", "hosts"} {
		if err := os.MkdirAll(filepath.Join(cfs, "nvmet", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := &started{addr: freeAddr(t), logs: make(chan string, 1), token: rand.Text() + rand.Text()}
	tokens := filepath.Join(dir, "tokens")
	if err := os.Mkdir(tokens, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tokens, agentauth.ClientKey), []byte(a.token), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-node-name", "storage-7", "-listen-address", a.addr, "-metrics-address", "",
		"-generations-dir", filepath.Join(dir, "gen"), "-configfs-root", cfs, "-token-dir", tokens,
		"-log-format", "text", "-log-level", "debug"}, extra...)
	a.cmd = agentCmd(ctx, args...)
	stderr, err := a.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "pillar-agent serving") {
				once = true
				close(served)
			}
		}
		a.logs <- all.String()
	}()
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		t.Fatalf("agent did not start serving:\n%s", <-a.logs)
	}
	t.Cleanup(func() {
		if a.cmd.ProcessState == nil {
			_ = a.cmd.Process.Kill()
			_ = a.cmd.Wait()
		}
	})
	return a
}

// TestServeAndSIGTERM calls the real agent and stops it with SIGTERM.
func TestServeAndSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startAgent(t, ctx)
	stranger, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	cc, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), a.withToken(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	// Health needs no token: the kubelet and the controller's watch ask.
	h, err := healthpb.NewHealthClient(stranger).Check(cctx, &healthpb.HealthCheckRequest{Service: "pillar.agent.v1.AgentService"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", h, err)
	}
	if _, err := agentv1.NewAgentServiceClient(stranger).DeleteVolume(cctx, &agentv1.DeleteVolumeRequest{VolumeId: "pvc-1"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("DeleteVolume without a token = %v, want UNAUTHENTICATED", err)
	}
	info, err := agentv1.NewAgentServiceClient(cc).GetAgentInfo(cctx, &agentv1.GetAgentInfoRequest{})
	if err != nil || info.GetNodeName() != "storage-7" {
		t.Fatalf("GetAgentInfo = %v, %v", info, err)
	}

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// All of stderr first: Wait closes the pipe once the process has
	// exited, and would cut off the last lines still unread.
	out := <-a.logs
	err = a.cmd.Wait()
	if err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0; logs:\n%s", err, out)
	}
	for _, want := range []string{"msg=\"shutting down\" reason=\"terminated signal received\"", "msg=stopped", "msg=rpc method=/pillar.agent.v1.AgentService/GetAgentInfo code=OK",
		"msg=\"refused an unauthenticated call\"", "method=/pillar.agent.v1.AgentService/DeleteVolume peer=127.0.0.1:"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

// TestMutualTLSRefusesClientsWithoutValidCertificate runs the real agent
// with mutual TLS: a controller with a certificate of the CA is served,
// clients without one, with another CA's, or in plaintext are refused.
func TestMutualTLSRefusesClientsWithoutValidCertificate(t *testing.T) {
	srvCA, cliCA := testpki.NewCA(t, "agent servers"), testpki.NewCA(t, "controllers")
	f := testpki.WriteFiles(t, t.TempDir(), srvCA.Server(t, "agent"), cliCA.CertPEM)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startAgent(t, ctx, "-tls-cert-file", f.Cert, "-tls-key-file", f.Key, "-tls-ca-file", f.CA)

	call := func(creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(creds), a.withToken(t))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_, err = agentv1.NewAgentServiceClient(cc).GetAgentInfo(cctx, &agentv1.GetAgentInfoRequest{})
		return err
	}
	tlsCreds := func(certs ...tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{RootCAs: srvCA.Pool(), Certificates: certs, ServerName: "127.0.0.1"})
	}
	if err := call(tlsCreds(cliCA.Client(t, "pillar-controller").TLS(t))); err != nil {
		t.Fatalf("controller with a valid certificate: %v", err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"no certificate":            tlsCreds(),
		"certificate of another CA": tlsCreds(testpki.NewCA(t, "controllers").Client(t, "pillar-controller").TLS(t)),
		"plaintext":                 insecure.NewCredentials(),
	} {
		if err := call(creds); status.Code(err) != codes.Unavailable {
			t.Errorf("%s: GetAgentInfo = %v, want UNAVAILABLE", name, err)
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, <-a.logs)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestMarks runs pillar-agent marks beside a running agent and after it:
// list reads while the agent holds the directory, end is refused until the
// agent has stopped, and then ends the lifecycle so that it is refused and
// a new one is admitted.
func TestMarks(t *testing.T) {
	const (
		uidOld = "0c4e5a1e-2222-4c3e-9a39-000000000001"
		uidNew = "0c4e5a1e-2222-4c3e-9a39-000000000002"
	)
	gen := filepath.Join(t.TempDir(), "gen")
	openStore := func() *fencing.Store {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := fencing.Open(ctx, gen, fencing.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := openStore()
	if _, err := s.Advance(context.Background(), "pvc-1", fencing.Token{UID: uidOld, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if out, _, code := runAgent(t, "marks", "-h"); code != 0 || !strings.Contains(out, "reset-ledger") {
		t.Errorf("marks -h: exit %d\n%s", code, out)
	}
	if _, stderr, code := runAgent(t, "marks", "end", "pvc-1"); code != 2 || !strings.Contains(stderr, "pillar-agent marks end: -uid: required") {
		t.Errorf("marks end without -uid: exit %d, stderr %q; want exit 2", code, stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startAgent(t, ctx, "-generations-dir", gen)

	out, stderr, code := runAgent(t, "marks", "list", "-generations-dir", gen, "-o", "json")
	var l struct {
		Marks []struct{ VolumeID, State, LifecycleUID string } `json:"marks"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Marks) != 1 || l.Marks[0].State != "active" || l.Marks[0].LifecycleUID != uidOld {
		t.Fatalf("marks list beside the agent: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	end := []string{"marks", "end", "-generations-dir", gen, "-uid", uidOld, "-yes", "-lock-timeout", "300ms", "pvc-1"}
	_, stderr, code = runAgent(t, end...)
	if code != 1 || !strings.Contains(stderr, "locked by another process, most likely pillar-agent: stop pillar-agent on this node first") {
		t.Fatalf("marks end beside the agent: exit %d, stderr %q; want exit 1 and the advice to stop the agent", code, stderr)
	}

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	logs := <-a.logs
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("agent after SIGTERM: %v\n%s", err, logs)
	}
	out, stderr, code = runAgent(t, end...)
	if code != 0 || !strings.Contains(out, `ended lifecycle "`+uidOld+`": the mark is now ended "`+uidOld+`"@4`) {
		t.Fatalf("marks end after the agent stopped: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	s = openStore()
	defer s.Close()
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidOld, Generation: 5}); fencing.RejectionReason(err) != fencing.ReasonLifecycleEnded {
		t.Errorf("the ended lifecycle: %v, want LIFECYCLE_ENDED", err)
	}
	if _, err := s.Advance(ctx, "pvc-1", fencing.Token{UID: uidNew, Generation: 1}); err != nil {
		t.Errorf("a new lifecycle after marks end: %v", err)
	}
}
