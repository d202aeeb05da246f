// Command agent-probe calls pillar-agent's API the way a stranger would:
// from wherever it runs (a pod, a node), with the token it is given or
// none, and prints the gRPC status of each call, one line each:
//
//	ListExports <code>
//	CreateVolume <code>
//	DeleteVolume <code>
//
// It is the attacker of tests/e2e/pillar's TestAgentRefusesStrangers, run
// in an ordinary pod (from the repository's bin/, built static so that any
// image can run it) and on the node. It exits 0 whatever the codes are;
// 2 on a bad flag.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"
)

func main() {
	addr := flag.String("addr", "", "the agent's host:port")
	token := flag.String("token", "", "a token to send (none if empty)")
	pool := flag.String("zfs-pool", "tank", "the ZFS pool CreateVolume asks for")
	volume := flag.String("volume", "pvc-agent-probe", "the volume ID CreateVolume and DeleteVolume name")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of each call")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "agent-probe: -addr is required")
		os.Exit(2)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if *token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(agentauth.Bearer(*token)))
	}
	cc, err := grpc.NewClient(*addr, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-probe:", err)
		os.Exit(2)
	}
	defer cc.Close()
	c := agentv1.NewAgentServiceClient(cc)
	tok := &agentv1.FencingToken{LifecycleUid: "6d3c1f0e-5b7a-4c2e-9f4d-000000000001", PublicationGeneration: 1}
	store := &agentv1.Store{Name: "zfs", Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: *pool, ParentDataset: "pillar", Sparse: true}}}
	for _, call := range []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"ListExports", func(ctx context.Context) error {
			_, err := c.ListExports(ctx, &agentv1.ListExportsRequest{})
			return err
		}},
		{"CreateVolume", func(ctx context.Context) error {
			_, err := c.CreateVolume(ctx, &agentv1.CreateVolumeRequest{FencingToken: tok, VolumeId: *volume, Store: store, CapacityBytes: 16 << 20})
			return err
		}},
		{"DeleteVolume", func(ctx context.Context) error {
			_, err := c.DeleteVolume(ctx, &agentv1.DeleteVolumeRequest{FencingToken: tok, VolumeId: *volume, Store: store})
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		err := call.do(ctx)
		cancel()
		fmt.Printf("%s %s\n", call.name, status.Code(err))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", call.name, err)
		}
	}
}
