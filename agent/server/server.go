package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/fencing"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

// DefaultGenerationsDir is where the agent keeps its fencing marks: a
// hostPath on the storage node, so marks outlive container restarts and
// reboots.
const DefaultGenerationsDir = fencing.DefaultDir

// DefaultOpenTimeout bounds how long New waits for the fencing directory's
// lock when Config.OpenTimeout is zero. A previous agent process that is
// still shutting down holds it for a moment; one that never lets go is
// another agent on the same directory, which must not run.
const DefaultOpenTimeout = 30 * time.Second

// DefaultReconcileWorkers is how many desired exports Reconcile converges
// at once when Config.ReconcileWorkers is zero. Each entry spends most of
// its time waiting for configfs writes and, for ZFS, for the device lookup,
// so a few in parallel shorten a post-reboot reconcile without flooding a
// small node.
const DefaultReconcileWorkers = 4

// Config configures a Server. The zero value of every field is usable.
type Config struct {
	// NodeName is the Kubernetes node the agent runs on, reported by
	// GetAgentInfo.
	NodeName string
	// Version is the agent's release version, reported by GetAgentInfo.
	Version string
	// GenerationsDir holds the durable fencing marks; DefaultGenerationsDir
	// if empty. It must be on a local filesystem.
	GenerationsDir string
	// ConfigfsRoot is the configfs mount point; configfs.DefaultRoot if
	// empty.
	ConfigfsRoot string
	// Logger receives structured logs; slog.Default() if nil.
	Logger *slog.Logger
	// CommandTimeout bounds every zfs, zpool and lvm command; the
	// backends' default (command.DefaultTimeout) if zero.
	CommandTimeout time.Duration
	// OpenTimeout bounds New's wait for the fencing directory's lock;
	// DefaultOpenTimeout if zero.
	OpenTimeout time.Duration
	// SysfsRoot is where sysfs is mounted, for the capability probes of
	// GetAgentInfo; "/sys" if empty.
	SysfsRoot string
	// ReconcileWorkers is how many desired exports Reconcile converges
	// concurrently; DefaultReconcileWorkers if zero.
	ReconcileWorkers int
	// ProcRoot is where procfs is mounted, for the boot ID GetAgentInfo
	// reports; "/proc" if empty.
	ProcRoot string
	// HostRoot, if not empty, is the host's root filesystem mounted into
	// the agent's container: zfs, zpool and lvm are the host's own, run
	// chrooted into it (command.Exec.Root).
	HostRoot string
	// LVMRejectDevices are the device-path regular expressions LVM must
	// never scan on this node (lvm.Config.RejectDevices).
	LVMRejectDevices []string
	// StoreConcurrency is how many backend calls of each kind (changes,
	// look-ups) run at once per store; DefaultStoreConcurrency if zero.
	// Further calls wait, within their deadline.
	StoreConcurrency int
}

// Server implements pillar.agent.v1.AgentService. It is safe for
// concurrent use; calls for one volume are serialized (a second concurrent
// call waits while its caller does), calls for different volumes run in
// parallel.
type Server struct {
	agentv1.UnimplementedAgentServiceServer

	cfg     Config
	log     *slog.Logger
	marks   *fencing.Store
	nvmet   nvmet
	stores  *storeCache
	locks   volumeLocks
	workers int
	// instanceID is drawn once per process start; GetAgentInfo reports
	// it so the controller notices a restart.
	instanceID string

	// known tracks what Stats reports: volumes this agent has seen exist
	// and the pillar-owned subsystems it last saw in configfs.
	knownMu sync.Mutex
	volumes map[string]struct{}
	exports map[string]struct{}

	// applied is every pillar-owned export as this agent last made it
	// (or found it at start-up), by NQN, until the agent removes it: what
	// RestoreDrift puts back when something else removes it. Unlike
	// exports, a read of configfs never changes it.
	appliedMu sync.Mutex
	applied   map[string]configfs.Export
	restored  atomic.Uint64
}

// Stats is what the agent currently knows about and owns, for gauges.
type Stats struct {
	// Volumes is the number of backend volumes the agent knows exist: at
	// start-up those whose lifecycle is active in the fencing marks (made
	// by CreateVolume on this node and not deleted since), then every
	// volume CreateVolume, ExpandVolume, ListVolumes and exports create or
	// find, minus those DeleteVolume destroys. A volume of this node that
	// no agent call ever created (one that predates the marks) counts once
	// a call finds it.
	Volumes int
	// Exports is the number of pillar-owned nvmet subsystems on the node,
	// as of the agent's last look at configfs (start-up, every change,
	// ListExports and Reconcile).
	Exports int
}

// New opens and locks the fencing store and prepares the server. It fails
// with a clear error when the mark directory cannot be created, read or
// locked (another agent holds it). It does not require nvmet to be loaded:
// Ready reports that.
func New(cfg Config) (*Server, error) {
	return newServer(cfg, configfs.NewFS(cfg.ConfigfsRoot), nil)
}

// newServer is New with the nvmet tree and the backend factory given, so
// unit tests can run without a kernel.
func newServer(cfg Config, nv nvmet, factory backendFactory) (*Server, error) {
	if cfg.GenerationsDir == "" {
		cfg.GenerationsDir = DefaultGenerationsDir
	}
	if cfg.ConfigfsRoot == "" {
		cfg.ConfigfsRoot = configfs.DefaultRoot
	}
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = "/sys"
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.OpenTimeout <= 0 {
		cfg.OpenTimeout = DefaultOpenTimeout
	}
	if cfg.CommandTimeout < 0 {
		return nil, fmt.Errorf("pillar-agent: command timeout %v must not be negative", cfg.CommandTimeout)
	}
	workers := cfg.ReconcileWorkers
	if workers <= 0 {
		workers = DefaultReconcileWorkers
	}
	slots := cfg.StoreConcurrency
	if slots <= 0 {
		slots = DefaultStoreConcurrency
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if factory == nil {
		factory = realBackends(command.Exec{Timeout: cfg.CommandTimeout, Root: cfg.HostRoot}, cfg.LVMRejectDevices)
	}
	instanceID, err := newInstanceID()
	if err != nil {
		return nil, fmt.Errorf("pillar-agent: instance ID: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.OpenTimeout)
	defer cancel()
	marks, err := fencing.Open(ctx, cfg.GenerationsDir, fencing.Options{})
	if err != nil {
		return nil, fmt.Errorf("pillar-agent: fencing marks in %s: %w", cfg.GenerationsDir, err)
	}
	s := &Server{
		cfg:        cfg,
		log:        log,
		marks:      marks,
		nvmet:      nv,
		stores:     newStoreCache(factory, slots),
		workers:    workers,
		instanceID: instanceID,
		volumes:    liveVolumes(ctx, log, marks),
		exports:    map[string]struct{}{},
		applied:    map[string]configfs.Export{},
	}
	// Count the exports that survived an agent restart. nvmet may not be
	// loaded yet; Ready says so and the count catches up on the next look.
	if st, err := nv.Read(ctx); err == nil {
		s.noteExports(st)
		for _, sub := range st.Subsystems {
			if _, ok := ownedVolumeID(sub.NQN); ok {
				e, _ := st.Export(sub.NQN)
				s.noteApplied(e)
			}
		}
	} else {
		log.Warn("cannot read nvmet configfs at start-up", "root", cfg.ConfigfsRoot, "error", err)
	}
	return s, nil
}

// Register registers the AgentService on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	agentv1.RegisterAgentServiceServer(g, s)
}

// Ready reports nil when the agent can serve: the nvmet configfs tree is
// present (configfs mounted, nvmet loaded) and the fencing directory is
// still a writable directory.
func (s *Server) Ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sub := filepath.Join(s.cfg.ConfigfsRoot, "nvmet", "subsystems")
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("nvmet configfs %s is missing (is configfs mounted and the nvmet module loaded?): %w", sub, err)
		}
		return fmt.Errorf("nvmet configfs %s: %w", sub, err)
	}
	dir := s.marks.Dir()
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return fmt.Errorf("fencing directory %s: %w", dir, err)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("fencing directory %s is not writable: %w", dir, err)
	}
	return nil
}

// Stats returns the current counts. It takes one short lock and does no
// I/O.
func (s *Server) Stats() Stats {
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	return Stats{Volumes: len(s.volumes), Exports: len(s.exports)}
}

// Close releases the fencing directory's lock, after waiting for calls
// that are changing a volume. Calls that would change a volume fail with
// UNAVAILABLE after Close (the calls that only read do not use the fencing
// store).
func (s *Server) Close() error {
	return s.marks.Close()
}

// liveVolumes returns the volumes whose lifecycle is active in the
// fencing marks: those that CreateVolume made on this node and no
// DeleteVolume has ended. The agent keeps no store configuration, so
// after a restart the marks are its only record of the volumes it serves
// until calls name their stores again; without them the volume gauge
// would start from zero. A mark is written before the backend acts, so a
// volume whose first CreateVolume failed and was never retried is counted
// as well until its DeleteVolume. A mark that cannot be read is left out
// and logged: its volume refuses every change until an operator repairs
// it.
func liveVolumes(ctx context.Context, log *slog.Logger, marks *fencing.Store) map[string]struct{} {
	vols := map[string]struct{}{}
	ents, err := os.ReadDir(marks.Dir())
	if err != nil {
		log.Warn("cannot list the fencing marks; the volume count starts from zero", "dir", marks.Dir(), "error", err)
		return vols
	}
	for _, e := range ents {
		id, err := fencing.VolumeIDFromFileName(e.Name())
		if err != nil || strings.HasPrefix(id, agentv1.SnapshotFencingKeyPrefix) {
			continue // the ledger, a lock or temporary file; a snapshot's mark
		}
		m, err := marks.Get(ctx, id)
		switch {
		case err != nil:
			log.Warn("fencing mark unreadable; its volume is not counted", "volume_id", id, "error", err)
		case m != nil && m.Phase == fencing.PhaseActive:
			vols[id] = struct{}{}
		}
	}
	return vols
}

func (s *Server) noteVolume(id string, exists bool) {
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	if exists {
		s.volumes[id] = struct{}{}
	} else {
		delete(s.volumes, id)
	}
}

func (s *Server) noteExport(nqn string, exists bool) {
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	if exists {
		s.exports[nqn] = struct{}{}
	} else {
		delete(s.exports, nqn)
	}
}

// noteExports replaces the export count with what a full read of configfs
// found.
func (s *Server) noteExports(st *configfs.State) {
	m := map[string]struct{}{}
	for _, sub := range st.Subsystems {
		if _, ok := ownedVolumeID(sub.NQN); ok {
			m[sub.NQN] = struct{}{}
		}
	}
	s.knownMu.Lock()
	s.exports = m
	s.knownMu.Unlock()
}
