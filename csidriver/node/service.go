package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/keylock"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/stage"
)

// DefaultStateDir is where stage records live on a worker (a hostPath, so
// they survive plugin restarts).
const DefaultStateDir = "/var/lib/pillar-csi/node"

// DefaultKubeletDir is kubelet's root directory (its --root-dir default).
const DefaultKubeletDir = "/var/lib/kubelet"

// Defaults of the bounded waits.
const (
	DefaultNamespaceTimeout  = 60 * time.Second
	DefaultDisconnectTimeout = 60 * time.Second
	DefaultResizeTimeout     = 30 * time.Second
)

// Tools are the commands pillar-node runs; Probe reports the plugin not
// ready while one is missing.
var Tools = []string{"blkid", "mkfs.ext4", "mkfs.xfs", "resize2fs", "xfs_growfs"}

// Config configures a Service. NodeName and HostNQN are required; every
// other field has a default.
type Config struct {
	// NodeName is the Kubernetes node name of this worker.
	NodeName string
	// HostNQN and HostID identify this initiator to targets (hostnqn,
	// hostid); see ReadHostIdentity.
	HostNQN string
	HostID  string
	// StateDir holds the stage records; DefaultStateDir when empty.
	StateDir string
	// KubeletDir is kubelet's root directory as pillar-node sees it;
	// DefaultKubeletDir when empty. Every staging and target path must
	// lie strictly under it: kubelet only ever chooses paths there, and
	// pillar-node, privileged and root, must not mount over or remove
	// anything else a caller of its socket names.
	KubeletDir string
	// Mounter mounts and unmounts. When nil, mount-utils' mounter reads
	// the mount table, and mounts and unmounts are mount(2) and
	// umount2(2) calls bounded by DefaultMountTimeout.
	Mounter mount.Interface
	// Logger gets one line per step, each with volume_id; slog.Default()
	// when nil.
	Logger *slog.Logger

	NamespaceTimeout  time.Duration // wait for the namespace's block device after connect
	DisconnectTimeout time.Duration // wait for a deleted controller to be gone
	ResizeTimeout     time.Duration // wait for a rescanned namespace to show the new size

	// runner and initiator are replaced by unit tests.
	runner    command.Runner
	initiator *nvmeof.Initiator
	lookPath  func(string) (string, error)
	// setReadOnly marks a block device read-only (BLKROSET).
	setReadOnly func(dev string) error
}

// Service is the CSI Node service.
type Service struct {
	csi.UnimplementedNodeServer

	cfg     Config
	nodeID  string
	store   *stage.Store
	mounter mount.Interface
	run     command.Runner
	nvme    *nvmeof.Initiator
	log     *slog.Logger
	locks   keylock.Locks // no lock over all volumes
}

// New validates cfg and returns the service. It creates the state
// directory if needed.
func New(cfg Config) (*Service, error) {
	nodeID, err := export.FormatNodeID(cfg.NodeName, cfg.HostNQN)
	if err != nil {
		return nil, fmt.Errorf("pillar-node: %w", err)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.KubeletDir == "" {
		cfg.KubeletDir = DefaultKubeletDir
	}
	if !filepath.IsAbs(cfg.KubeletDir) || filepath.Clean(cfg.KubeletDir) == "/" {
		return nil, fmt.Errorf("pillar-node: kubelet directory %q: want an absolute path other than /", cfg.KubeletDir)
	}
	cfg.KubeletDir = filepath.Clean(cfg.KubeletDir)
	store, err := stage.NewStore(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("pillar-node: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.runner == nil {
		cfg.runner = command.Exec{Timeout: DefaultCommandTimeout}
	}
	if cfg.Mounter == nil {
		cfg.Mounter = timedMounter{Interface: mount.NewWithoutSystemd(""), timeout: DefaultMountTimeout}
	}
	if cfg.initiator == nil {
		cfg.initiator = nvmeof.New(nvmeof.DefaultPaths)
	}
	if cfg.lookPath == nil {
		cfg.lookPath = exec.LookPath
	}
	if cfg.setReadOnly == nil {
		cfg.setReadOnly = setBlockReadOnly
	}
	if cfg.NamespaceTimeout <= 0 {
		cfg.NamespaceTimeout = DefaultNamespaceTimeout
	}
	if cfg.DisconnectTimeout <= 0 {
		cfg.DisconnectTimeout = DefaultDisconnectTimeout
	}
	if cfg.ResizeTimeout <= 0 {
		cfg.ResizeTimeout = DefaultResizeTimeout
	}
	return &Service{
		cfg:     cfg,
		nodeID:  nodeID,
		store:   store,
		mounter: cfg.Mounter,
		run:     cfg.runner,
		nvme:    cfg.initiator,
		log:     cfg.Logger,
	}, nil
}

// NodeID returns the node ID this service reports (export.NodeID).
func (s *Service) NodeID() string { return s.nodeID }

// Ready is the readiness the Identity service's Probe reports: the NVMe-oF
// initiator is loaded (/dev/nvme-fabrics exists, made by nvme_fabrics,
// and nvme_tcp is registered), the state directory is writable, and every
// tool in Tools is on PATH.
func (s *Service) Ready(ctx context.Context) error {
	var errs []error
	paths := s.nvme.Paths()
	if _, err := os.Stat(paths.Fabrics); err != nil {
		errs = append(errs, fmt.Errorf("NVMe-oF initiator not loaded (modprobe nvme_fabrics nvme_tcp): %w", err))
	}
	if _, err := os.Stat(filepath.Join(paths.Sys, "module", "nvme_tcp")); err != nil {
		errs = append(errs, fmt.Errorf("nvme_tcp not loaded (modprobe nvme_tcp): %w", err))
	}
	f, err := os.CreateTemp(s.store.Dir(), ".probe-*")
	if err != nil {
		errs = append(errs, fmt.Errorf("state directory not writable: %w", err))
	} else {
		f.Close()
		os.Remove(f.Name())
	}
	for _, t := range Tools {
		if _, err := s.cfg.lookPath(t); err != nil {
			errs = append(errs, fmt.Errorf("tool missing: %w", err))
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// NodeGetInfo reports the node ID (export.FormatNodeID). No topology: an
// NVMe/TCP target is reachable from every worker. No volume limit: the
// kernel numbers controllers and namespaces with IDAs, without a small cap.
func (s *Service) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.nodeID}, nil
}

// NodeGetCapabilities reports what this service implements.
func (s *Service) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, c := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	} {
		caps = append(caps, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}},
		})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// begin takes the volume's lock and returns its unlock and a logger that
// puts volume_id on every line.
func (s *Service) begin(volumeID string) (unlock func(), log *slog.Logger, err error) {
	unlock, err = s.lock(volumeID)
	if err != nil {
		return nil, nil, err
	}
	return unlock, s.log.With("volume_id", volumeID), nil
}

// stagedRecord returns the complete stage record of a volume; a volume
// without one (or with a stage still in progress or failed) gets code.
func (s *Service) stagedRecord(volumeID string, code codes.Code) (stage.Record, error) {
	r, ok, err := s.store.Get(volumeID)
	switch {
	case err != nil:
		return stage.Record{}, statusOf("read stage record", err)
	case !ok || !r.Complete:
		return stage.Record{}, status.Errorf(code, "volume %s is not staged on this node", volumeID)
	}
	return r, nil
}

// lock takes the volume's lock or answers Aborted: CSI lets a CO retry an
// operation on a busy volume, and serialising here keeps two stages of one
// volume from racing on connect and mkfs.
func (s *Service) lock(volumeID string) (func(), error) {
	unlock, _, ok := s.locks.TryLock(volumeID, "")
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %s is already in progress", volumeID)
	}
	return unlock, nil
}
