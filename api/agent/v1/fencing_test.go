package agentv1_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// refusingAgent refuses every CreateVolume as stale and every DeleteVolume
// with a plain failed precondition.
type refusingAgent struct {
	agentv1.UnimplementedAgentServiceServer
	mark *agentv1.FencingToken
}

func (a *refusingAgent) CreateVolume(_ context.Context, req *agentv1.CreateVolumeRequest) (*agentv1.CreateVolumeResponse, error) {
	return nil, agentv1.NewFencingError(&agentv1.FencingRejection{
		Reason:    agentv1.FencingRejection_REASON_STALE_GENERATION,
		VolumeId:  req.GetVolumeId(),
		Presented: req.GetFencingToken(),
		Mark:      a.mark,
	}, "generation 3 is older than the mark 5")
}

func (a *refusingAgent) DeleteVolume(context.Context, *agentv1.DeleteVolumeRequest) (*agentv1.DeleteVolumeResponse, error) {
	return nil, status.Error(codes.FailedPrecondition, "volume group vg0 does not exist")
}

// The rejection detail must survive the wire: the controller tells a
// fencing refusal from other failed preconditions by it.
func TestFencingRejectionCrossesTheWire(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	mark := &agentv1.FencingToken{LifecycleUid: "3f1c", PublicationGeneration: 5}
	agentv1.RegisterAgentServiceServer(srv, &refusingAgent{mark: mark})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := agentv1.NewAgentServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	presented := &agentv1.FencingToken{LifecycleUid: "3f1c", PublicationGeneration: 3}
	_, err = client.CreateVolume(ctx, &agentv1.CreateVolumeRequest{FencingToken: presented, VolumeId: "pvc-1"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("CreateVolume error = %v, want FailedPrecondition", err)
	}
	rej, ok := agentv1.FencingRejectionOf(fmt.Errorf("create pvc-1: %w", err))
	if !ok {
		t.Fatalf("FencingRejectionOf(%v) found no rejection", err)
	}
	want := &agentv1.FencingRejection{
		Reason:    agentv1.FencingRejection_REASON_STALE_GENERATION,
		VolumeId:  "pvc-1",
		Presented: presented,
		Mark:      mark,
	}
	if !proto.Equal(rej, want) {
		t.Fatalf("rejection = %v, want %v", rej, want)
	}

	_, err = client.DeleteVolume(ctx, &agentv1.DeleteVolumeRequest{FencingToken: presented, VolumeId: "pvc-1"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("DeleteVolume error = %v, want FailedPrecondition", err)
	}
	if rej, ok := agentv1.FencingRejectionOf(err); ok {
		t.Fatalf("a failed precondition without detail was taken for a fencing refusal: %v", rej)
	}
}

func TestFencingRejectionOfOtherErrors(t *testing.T) {
	for _, err := range []error{
		nil,
		errors.New("plain"),
		status.Error(codes.Internal, "zfs create failed"),
		agentv1.NewFencingError(nil, "no detail"),
	} {
		if rej, ok := agentv1.FencingRejectionOf(err); ok {
			t.Errorf("FencingRejectionOf(%v) = %v, true; want false", err, rej)
		}
	}
	if got := status.Code(agentv1.NewFencingError(nil, "no detail")); got != codes.FailedPrecondition {
		t.Errorf("NewFencingError(nil) code = %v, want FailedPrecondition", got)
	}
}

func ExampleFencingRejectionOf() {
	// What an agent returns for a request older than the volume's mark.
	err := agentv1.NewFencingError(&agentv1.FencingRejection{
		Reason:   agentv1.FencingRejection_REASON_STALE_GENERATION,
		VolumeId: "pvc-1",
	}, "stale generation")

	// What the controller does with it: a stale controller must stop, not
	// retry.
	if rej, ok := agentv1.FencingRejectionOf(err); ok {
		fmt.Println(status.Code(err), rej.GetReason(), rej.GetVolumeId())
	}
	// Output: FailedPrecondition REASON_STALE_GENERATION pvc-1
}
