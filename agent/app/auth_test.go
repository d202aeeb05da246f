package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"
)

var (
	testToken  = strings.Repeat("t0ken", 8)
	otherToken = strings.Repeat("other", 8)
)

// tokenOptions are testOptions with one accepted token.
func tokenOptions(t testing.TB) Options {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, agentauth.ClientKey), []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.AllowUnauthenticated = false
	o.TokenDir = dir
	return o
}

func bearer(tok string) grpc.CallOption {
	return grpc.PerRPCCredsCallOption{Creds: agentauth.Bearer(tok)}
}

// A caller without the token reaches nothing but health; the refusal is
// UNAUTHENTICATED, names no token, and is logged with the caller's address.
func TestTokenRequired(t *testing.T) {
	svc := newFake()
	a := start(t, tokenOptions(t), svc)
	cc := dial(t, a.grpcAddr, nil)
	if _, err := healthCheck(cc, agentService); err != nil {
		t.Fatalf("health without a token: %v", err)
	}
	for name, opts := range map[string][]grpc.CallOption{
		"no token":      nil,
		"another token": {bearer(otherToken)},
		"empty token":   {bearer("")},
	} {
		_, err := agentInfo(cc, opts...)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: GetAgentInfo = %v, want UNAUTHENTICATED", name, err)
		}
		if strings.Contains(status.Convert(err).Message(), testToken) {
			t.Errorf("%s: the refusal carries the accepted token: %v", name, err)
		}
	}
	// The slow volume would block the handler: a refused call never gets
	// there.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := agentv1.NewAgentServiceClient(cc).CreateVolume(metadata.AppendToOutgoingContext(ctx, agentauth.MetadataKey, "Bearer "+otherToken),
		&agentv1.CreateVolumeRequest{VolumeId: "slow"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("CreateVolume with another token = %v, want UNAUTHENTICATED", err)
	}
	select {
	case <-svc.started:
		t.Fatal("a refused CreateVolume reached the service")
	default:
	}
	if info, err := agentInfo(cc, bearer(testToken)); err != nil || info.GetNodeName() != "storage-1" {
		t.Fatalf("GetAgentInfo with the token = %v, %v", info, err)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	logs := a.logs.String()
	if !strings.Contains(logs, `"msg":"refused an unauthenticated call"`) || !strings.Contains(logs, `"peer":"127.0.0.1:`) {
		t.Errorf("no refusal with the peer's address in the log:\n%s", logs)
	}
	if strings.Contains(logs, testToken) {
		t.Errorf("the log carries the token:\n%s", logs)
	}
}

func TestTokenStartup(t *testing.T) {
	o := testOptions()
	o.AllowUnauthenticated = false
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "-token-dir: required without mutual TLS") {
		t.Errorf("plaintext without a token: %v", err)
	}
	o.TokenDir = t.TempDir() // empty
	if err := run(context.Background(), o, func(Options, *slog.Logger) (service, error) { return newFake(), nil }); err == nil ||
		!strings.Contains(err.Error(), "no token in it") {
		t.Errorf("an empty -token-dir: %v", err)
	}
}

// TestEveryRPCNeedsTheToken: each method of the agent's service, the
// snapshot calls included, refuses a caller without the token; a method
// added later is covered without a change here.
func TestEveryRPCNeedsTheToken(t *testing.T) {
	a := start(t, tokenOptions(t), newFake())
	cc := dial(t, a.grpcAddr, nil)
	desc := agentv1.AgentService_ServiceDesc
	if len(desc.Methods) < 15 {
		t.Fatalf("%d methods in %s, want the 15 of agent.proto at least", len(desc.Methods), desc.ServiceName)
	}
	for _, m := range desc.Methods {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// An empty message is a valid encoding of every request type.
		err := cc.Invoke(ctx, "/"+desc.ServiceName+"/"+m.MethodName, &emptypb.Empty{}, &emptypb.Empty{})
		cancel()
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s without a token: %v, want UNAUTHENTICATED", m.MethodName, err)
		}
	}
}
