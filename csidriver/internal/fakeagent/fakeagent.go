// Package fakeagent is an in-process pillar-agent for pillar-controller's
// tests: a real gRPC server, on a real TCP port, speaking the real
// api/agent/v1 API and the gRPC health service, backed by an in-memory
// model the test sets. It stands in for the agent only where the test is
// about the controller; the kernel-lab suites run the real pillar-agent.
package fakeagent

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"
	"github.com/pillar-csi/pillar-csi/fencing"
)

// Capacity is a store's answer to GetCapacity: the sizes, or Err (a
// gRPC status error) when the agent would fail.
type Capacity struct {
	Total, Available int64
	Err              error
	// UnzeroedThinPool: the store is an LVM thin pool that does not zero
	// new chunks. As pillar-agent does, GetCapacity refuses it
	// (FAILED_PRECONDITION with a StoreRefusal detail) unless the request's
	// LvmStore allows unzeroed thin pools.
	UnzeroedThinPool bool
}

// Agent is one fake agent. Its fields are guarded by the agent's lock; use
// the setters while it serves.
type Agent struct {
	mu       sync.Mutex
	node     string
	version  string
	bootID   string
	caps     []agentv1.Capability
	restored uint64              // GetAgentInfo's exports_restored
	marksID  string              // GetAgentInfo's marks_store_id
	stores   map[string]Capacity // by pool or volume group
	instance string
	calls    map[string]int
	// presented are the generations the fenced calls presented, by
	// method and volume.
	presented map[[2]string][]uint64

	// Volumes (EnableVolumes).
	marks     *fencing.Store
	round     int64
	volumes   map[string]Volume
	exports   map[string]Export
	snapshots map[string]Snapshot
	fail      map[string]error
	after     map[string]func()
	hooks     Hooks

	creds  credentials.TransportCredentials
	token  string
	addr   string
	srv    *grpc.Server
	health *health.Server
}

// Options of a fake agent.
type Options struct {
	NodeName string
	Version  string
	// Creds are the server's TLS credentials; nil serves plaintext.
	Creds credentials.TransportCredentials
	// Addr is the listen address; 127.0.0.1:0 if empty.
	Addr string
	// Token, if not empty, is the one agent token every call but health
	// must carry, as pillar-agent's -token-dir requires.
	Token string
}

// Start serves a fake agent that reports every capability, SERVING, and no
// stores (GetCapacity answers FAILED_PRECONDITION until SetStore).
func Start(o Options) (*Agent, error) {
	a := &Agent{
		node:    o.NodeName,
		version: o.Version,
		bootID:  newID(),
		caps: []agentv1.Capability{agentv1.Capability_CAPABILITY_BACKEND_ZFS, agentv1.Capability_CAPABILITY_BACKEND_LVM,
			agentv1.Capability_CAPABILITY_BACKEND_LVM_THIN, agentv1.Capability_CAPABILITY_TRANSPORT_NVMEOF_TCP, agentv1.Capability_CAPABILITY_SNAPSHOTS},
		stores:    map[string]Capacity{},
		calls:     map[string]int{},
		presented: map[[2]string][]uint64{},
		creds:     o.Creds,
		addr:      o.Addr,
		token:     o.Token,
	}
	if a.addr == "" {
		a.addr = "127.0.0.1:0"
	}
	if err := a.serve(); err != nil {
		return nil, err
	}
	return a, nil
}

// Addr is host:port the agent listens on.
func (a *Agent) Addr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// Port is the agent's TCP port.
func (a *Agent) Port() int32 {
	_, p, _ := net.SplitHostPort(a.Addr())
	var n int32
	fmt.Sscan(p, &n)
	return n
}

func (a *Agent) serve() error {
	l, err := net.Listen("tcp", a.addr)
	if err != nil {
		return err
	}
	var opts []grpc.ServerOption
	if a.creds != nil {
		opts = append(opts, grpc.Creds(a.creds))
	}
	if a.token != "" {
		opts = append(opts, grpc.UnaryInterceptor(a.checkToken))
	}
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	agentv1.RegisterAgentServiceServer(srv, &service{a: a})
	hs.SetServingStatus(agentv1.AgentService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	a.mu.Lock()
	a.addr, a.srv, a.health, a.instance = l.Addr().String(), srv, hs, newID()
	a.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// checkToken refuses AgentService calls without the agent's token, as
// pillar-agent does (health is served by a stream, which this does not
// intercept).
func (a *Agent) checkToken(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, "/"+agentv1.AgentService_ServiceDesc.ServiceName+"/") {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(agentauth.MetadataKey); len(v) != 1 || v[0] != "Bearer "+a.token {
			return nil, agentauth.Refusal(agentauth.ErrWrong)
		}
	}
	return h(ctx, req)
}

// Stop ends the agent as a crash would: connections are cut.
func (a *Agent) Stop() {
	a.mu.Lock()
	srv := a.srv
	a.srv = nil
	a.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Restart stops the agent and serves again on the same address, as a new
// instance. With reboot the boot ID changes too.
func (a *Agent) Restart(reboot bool) error {
	a.Stop()
	if reboot {
		a.mu.Lock()
		a.bootID = newID()
		a.mu.Unlock()
	}
	return a.serve()
}

// SetCreds changes the TLS credentials; they apply from the next Restart.
func (a *Agent) SetCreds(c credentials.TransportCredentials) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.creds = c
}

// SetServing sets the health status.
func (a *Agent) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	a.mu.Lock()
	hs := a.health
	a.mu.Unlock()
	hs.SetServingStatus(agentv1.AgentService_ServiceDesc.ServiceName, st)
}

// SetCapabilities replaces the capabilities GetAgentInfo reports.
func (a *Agent) SetCapabilities(c ...agentv1.Capability) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.caps = c
}

// SetMarksStoreID sets the marks_store_id GetAgentInfo reports.
func (a *Agent) SetMarksStoreID(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.marksID = id
}

// SetExportsRestored sets the exports_restored GetAgentInfo reports.
func (a *Agent) SetExportsRestored(n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.restored = n
}

// SetStore sets what GetCapacity answers for a pool or volume group.
func (a *Agent) SetStore(pool string, c Capacity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stores[pool] = c
}

// InstanceID is the current instance's ID.
func (a *Agent) InstanceID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.instance
}

// BootID is the current boot ID.
func (a *Agent) BootID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bootID
}

// Calls is how many times the method (a short name such as "GetCapacity")
// was called.
func (a *Agent) Calls(method string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[method]
}

// Presented is the publication generation each fenced call of the method
// for the volume presented, in order, refused ones included.
func (a *Agent) Presented(method, volumeID string) []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.presented[[2]string{method, volumeID}])
}

type service struct {
	agentv1.UnimplementedAgentServiceServer
	a *Agent
}

func (s *service) GetAgentInfo(context.Context, *agentv1.GetAgentInfoRequest) (*agentv1.GetAgentInfoResponse, error) {
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls["GetAgentInfo"]++
	return &agentv1.GetAgentInfoResponse{AgentVersion: a.version, NodeName: a.node, Capabilities: append([]agentv1.Capability(nil), a.caps...),
		InstanceId: a.instance, BootId: a.bootID, ExportsRestored: a.restored, MarksStoreId: a.marksID}, nil
}

func (s *service) GetCapacity(_ context.Context, req *agentv1.GetCapacityRequest) (*agentv1.GetCapacityResponse, error) {
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls["GetCapacity"]++
	pool := req.GetStore().GetZfs().GetPool()
	if pool == "" {
		pool = req.GetStore().GetLvm().GetVolumeGroup()
	}
	if pool == "" {
		return nil, status.Error(codes.InvalidArgument, "store: no backend (zfs or lvm) is set")
	}
	c, ok := a.stores[pool]
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "store %q: pool or volume group %q does not exist", req.GetStore().GetName(), pool)
	}
	if c.UnzeroedThinPool && !req.GetStore().GetLvm().GetAllowUnzeroedThinPool() {
		l := req.GetStore().GetLvm()
		return nil, agentv1.NewStoreRefusalError(&agentv1.StoreRefusal{Reason: agentv1.StoreRefusal_REASON_THIN_POOL_NOT_ZEROING},
			fmt.Sprintf("GetCapacity lvm:%s/%s: thin pool does not zero new blocks", l.GetVolumeGroup(), l.GetThinPool()))
	}
	if c.Err != nil {
		return nil, c.Err
	}
	return &agentv1.GetCapacityResponse{TotalBytes: c.Total, AvailableBytes: c.Available}, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
