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

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// refusingStoreAgent refuses every store of GetCapacity, with the detail
// when the store is LVM and without it otherwise.
type refusingStoreAgent struct {
	agentv1.UnimplementedAgentServiceServer
}

func (refusingStoreAgent) GetCapacity(_ context.Context, req *agentv1.GetCapacityRequest) (*agentv1.GetCapacityResponse, error) {
	if req.GetStore().GetLvm() != nil {
		return nil, agentv1.NewStoreRefusalError(&agentv1.StoreRefusal{
			Reason: agentv1.StoreRefusal_REASON_THIN_POOL_NOT_ZEROING,
		}, "vg0/thinpool has zeroing off")
	}
	return nil, status.Error(codes.FailedPrecondition, "pool tank does not exist")
}

// The refusal detail must survive the wire: the controller tells a refused
// store from a missing one by it.
func TestStoreRefusalCrossesTheWire(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	agentv1.RegisterAgentServiceServer(srv, refusingStoreAgent{})
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

	lvm := &agentv1.Store{Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{VolumeGroup: "vg0", ThinPool: "thinpool"}}}
	_, err = client.GetCapacity(ctx, &agentv1.GetCapacityRequest{Store: lvm})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("GetCapacity error = %v, want FailedPrecondition", err)
	}
	ref, ok := agentv1.StoreRefusalOf(fmt.Errorf("capacity: %w", err))
	if !ok || ref.GetReason() != agentv1.StoreRefusal_REASON_THIN_POOL_NOT_ZEROING {
		t.Fatalf("StoreRefusalOf(%v) = %v, %v; want REASON_THIN_POOL_NOT_ZEROING", err, ref, ok)
	}
	if _, ok := agentv1.FencingRejectionOf(err); ok {
		t.Fatalf("a store refusal was taken for a fencing refusal: %v", err)
	}

	zfs := &agentv1.Store{Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: "tank"}}}
	_, err = client.GetCapacity(ctx, &agentv1.GetCapacityRequest{Store: zfs})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("GetCapacity error = %v, want FailedPrecondition", err)
	}
	if ref, ok := agentv1.StoreRefusalOf(err); ok {
		t.Fatalf("a failed precondition without detail was taken for a store refusal: %v", ref)
	}
}

func TestStoreRefusalOfOtherErrors(t *testing.T) {
	for _, err := range []error{
		nil,
		errors.New("plain"),
		status.Error(codes.Internal, "lvm lvs failed"),
		agentv1.NewStoreRefusalError(nil, "no detail"),
		agentv1.NewFencingError(&agentv1.FencingRejection{Reason: agentv1.FencingRejection_REASON_MISSING_TOKEN}, "no token"),
	} {
		if ref, ok := agentv1.StoreRefusalOf(err); ok {
			t.Errorf("StoreRefusalOf(%v) = %v, true; want false", err, ref)
		}
	}
	if got := status.Code(agentv1.NewStoreRefusalError(nil, "no detail")); got != codes.FailedPrecondition {
		t.Errorf("NewStoreRefusalError(nil) code = %v, want FailedPrecondition", got)
	}
}
