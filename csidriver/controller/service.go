package controller

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/keylock"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

// Finalizer keeps a PillarVolumeState until the agent accepted the End of
// its lifecycle (DeleteVolume).
const Finalizer = "pillar-csi.io/volume"

// Config of the Controller service.
type Config struct {
	// Client reads Pillar* configuration (the manager's cached client)
	// and writes PillarVolumeStates.
	Client client.Client
	// Reader reads PillarVolumeStates straight from the API server (the
	// manager's APIReader): every decision about a volume starts from its
	// current record, never from a cache that may lag.
	Reader client.Reader
	// PersistentVolumes lists PersistentVolumes by IndexVolumeHandle (the
	// manager's cached client, with that index); nil lists them all from
	// Reader.
	PersistentVolumes client.Reader
	// Connector reaches agents (shared with the reconcilers).
	Connector *reconcile.Connector
	// Metrics may be nil.
	Metrics *Metrics
	// Recorder records events on PillarVolumeStates and on the claims
	// they were created for; may be nil.
	Recorder events.EventRecorder
	// StoreChanged is told about a store whose space changed; may be nil.
	StoreChanged func(store string)
	// Logger; slog.Default() if nil.
	Logger *slog.Logger
}

// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarvolumestates,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=pillar-csi.io,resources=pillarvolumestates/status,verbs=get;update;patch

// Service is the CSI Controller service. Calls for one volume are
// serialized (a concurrent one gets ABORTED, which the CO retries); calls
// for different volumes run in parallel.
type Service struct {
	csi.UnimplementedControllerServer
	cfg Config
	log *slog.Logger

	locks keylock.Locks

	claims eventQueue // the claims' events, off the calls' path
}

// New returns the Controller service.
func New(cfg Config) *Service {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Service{cfg: cfg, log: log}
}

// lock marks a volume busy; the second caller gets ABORTED.
func (s *Service) lock(id string) (func(), error) {
	return s.lockKey(id, "volume "+id)
}

// lockKey marks key busy; the second caller gets ABORTED, naming what.
func (s *Service) lockKey(key, what string) (func(), error) {
	unlock, _, ok := s.locks.TryLock(key, "")
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", what)
	}
	return unlock, nil
}

// getVolume reads a PillarVolumeState fresh; nil when there is none.
func (s *Service) getVolume(ctx context.Context, id string) (*v1alpha1.PillarVolumeState, error) {
	var v v1alpha1.PillarVolumeState
	if err := s.cfg.Reader.Get(ctx, types.NamespacedName{Name: id}, &v); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, status.Errorf(codes.Unavailable, "reading PillarVolumeState %s: %v", id, err)
	}
	return &v, nil
}

// storeOf reads the volume's store, its agent and the agent's connection,
// and refuses a store that is not the one the volume was created in.
func (s *Service) storeOf(ctx context.Context, v *v1alpha1.PillarVolumeState) (*v1alpha1.PillarStore, *agentv1.Store, *agentclient.Conn, error) {
	st, proto, conn, err := s.storeNamed(ctx, v.Spec.StoreName)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := sameStore(v, st); err != nil {
		return nil, nil, nil, err
	}
	return st, proto, conn, nil
}

// storeNamed is the PillarStore name, the store the agent is told about,
// and the connection to its agent.
func (s *Service) storeNamed(ctx context.Context, name v1alpha1.ObjectName) (*v1alpha1.PillarStore, *agentv1.Store, *agentclient.Conn, error) {
	var st v1alpha1.PillarStore
	if err := s.cfg.Client.Get(ctx, types.NamespacedName{Name: string(name)}, &st); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil, status.Errorf(codes.FailedPrecondition, "PillarStore %q does not exist", name)
		}
		return nil, nil, nil, status.Errorf(codes.Unavailable, "reading PillarStore %q: %v", name, err)
	}
	proto := agentclient.StoreFor(&st)
	if proto == nil {
		return nil, nil, nil, status.Errorf(codes.FailedPrecondition, "PillarStore %q has no %s section", name, st.Spec.Type)
	}
	var a v1alpha1.PillarAgent
	if err := s.cfg.Client.Get(ctx, types.NamespacedName{Name: string(st.Spec.AgentName)}, &a); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil, status.Errorf(codes.FailedPrecondition, "PillarAgent %q of store %q does not exist", st.Spec.AgentName, name)
		}
		return nil, nil, nil, status.Errorf(codes.Unavailable, "reading PillarAgent %q: %v", st.Spec.AgentName, err)
	}
	if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason == v1alpha1.ReasonMarksStoreChanged {
		return nil, nil, nil, status.Errorf(codes.FailedPrecondition, "PillarAgent %q of store %q lost its fencing marks: %s", a.Name, name, c.Message)
	}
	conn, err := s.cfg.Connector.Connect(ctx, &a)
	if err != nil {
		return nil, nil, nil, status.Errorf(codes.Unavailable, "agent %q: %v", a.Name, err)
	}
	return &st, proto, conn, nil
}

func (s *Service) storeChanged(store v1alpha1.ObjectName) {
	if s.cfg.StoreChanged != nil {
		s.cfg.StoreChanged(string(store))
	}
}

// event records an event on the volume's record and on its claim.
func (s *Service) event(v *v1alpha1.PillarVolumeState, typ, reason, format string, args ...any) {
	s.recordEvent(s.cfg.Recorder, v, typ, reason, "CSI", format, args...)
}

// errorf is a status error with the volume named.
func errorf(c codes.Code, id, format string, args ...any) error {
	return status.Errorf(c, "volume %s: %s", id, fmt.Sprintf(format, args...))
}
