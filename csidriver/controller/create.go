package controller

import (
	"context"
	"net/netip"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// Keys the external-provisioner adds to CreateVolume's parameters with
// --extra-create-metadata.
const (
	paramPVCName      = "csi.storage.k8s.io/pvc/name"
	paramPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	paramPVName       = "csi.storage.k8s.io/pv/name"
)

// Annotations on a PillarVolumeState naming the claim it was created for,
// for operators.
const (
	AnnotationPVCName      = v1alpha1.AnnotationPVCName
	AnnotationPVCNamespace = v1alpha1.AnnotationPVCNamespace
)

// createVolume writes the volume's record first, then has the agent create
// the backend volume and export it, recording each step as the agent
// confirms it, so that a retry after a crash at any point resumes from the
// record instead of leaving an orphan.
func (s *Service) createVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	params := req.GetParameters()
	multiWriters := params[v1alpha1.StorageClassParamMultiNodeBlockWriters] == "true"
	if err := checkCapabilities(req.GetVolumeCapabilities(), multiWriters); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: %v", req.GetName(), err)
	}
	size, err := capacityFor(req.GetCapacityRange())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: %v", req.GetName(), err)
	}
	ds, err := dataSourceOf(req.GetName(), req.GetVolumeContentSource())
	if err != nil {
		return nil, err
	}
	storeName, protoName := params[v1alpha1.StorageClassParamStore], params[v1alpha1.StorageClassParamProtocol]
	if storeName == "" || protoName == "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: parameters %s and %s are required (a StorageClass generated from a PillarStorageClass has them)",
			req.GetName(), v1alpha1.StorageClassParamStore, v1alpha1.StorageClassParamProtocol)
	}
	id := volumeIDFor(req.GetName())
	unlock, err := s.lock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if ds != nil {
		// A volume from a snapshot or a clone lives in its source's
		// store and is at least as large as its source. A retry of a
		// volume already made needs its source no more (it may be gone):
		// its record answers, sameSource checks the request.
		v, err := s.getVolume(ctx, id)
		if err != nil {
			return nil, err
		}
		if v == nil || !v.Status.BackendCreated {
			if size, err = s.checkSource(ctx, id, ds, storeName, req.GetCapacityRange(), size); err != nil {
				return nil, err
			}
		}
	}
	// The common case is a new volume: its record is written before
	// anything is read. Any other outcome (the record exists, or could not
	// be written) is decided on a fresh read, as a retry is.
	created, err := s.record(ctx, id, size, storeName, protoName, params, ds)
	if err != nil {
		created = nil
	}
	var vol *v1alpha1.PillarVolumeState
	err = s.retryingFrom(ctx, id, created, func(v *v1alpha1.PillarVolumeState) error {
		unspent := v != nil && v == created // its first generation is this call's
		if v == nil {
			var err error
			if v, err = s.record(ctx, id, size, storeName, protoName, params, ds); err != nil {
				return err
			}
			unspent = true
		} else if !v.DeletionTimestamp.IsZero() {
			// An interrupted DeleteVolume or rollback: finish it, then
			// let the CO retry into a new volume.
			if err := s.teardown(ctx, v); err != nil {
				return err
			}
			return errorf(codes.Aborted, id, "an earlier volume of this name was being deleted; it is gone now: retry")
		} else if err := compatible(v, storeName, protoName, multiWriters, req.GetCapacityRange()); err != nil {
			return err
		} else if err := sameSource(v, ds); err != nil {
			return err
		}
		var err error
		vol, err = s.provision(ctx, v, req.GetCapacityRange(), unspent)
		return err
	})
	if err != nil {
		return nil, err
	}
	vc, err := s.volumeContext(ctx, vol)
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: vol.Status.CapacityBytes, VolumeContext: vc,
		ContentSource: csiSource(vol.Spec.DataSource)}}, nil
}

// record creates the PillarVolumeState of a new volume, with the export
// spec copied from the PillarProtocol, so that later changes of the
// protocol leave this volume as it was made. The record starts at
// publicationGeneration 1, and that first generation belongs to the
// caller: only one create of a name succeeds, as only one compare-and-swap
// of a resourceVersion does, so it needs no update of its own.
func (s *Service) record(ctx context.Context, id string, size int64, storeName, protoName string, params map[string]string, ds *v1alpha1.VolumeDataSource) (*v1alpha1.PillarVolumeState, error) {
	// A store being deleted waits for its volumes; it takes no new one.
	var st v1alpha1.PillarStore
	if err := s.cfg.Client.Get(ctx, types.NamespacedName{Name: storeName}, &st); err == nil && !st.DeletionTimestamp.IsZero() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s: PillarStore %q is being deleted: it takes no new volume", id, storeName)
	}
	var proto v1alpha1.PillarProtocol
	if err := s.cfg.Client.Get(ctx, types.NamespacedName{Name: protoName}, &proto); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, status.Errorf(codes.InvalidArgument, "volume %s: PillarProtocol %q does not exist", id, protoName)
		}
		return nil, errorf(codes.Unavailable, id, "reading PillarProtocol %q: %v", protoName, err)
	}
	t := proto.Spec.NVMeOFTCP
	if t == nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: PillarProtocol %q has no nvmeofTCP section", id, protoName)
	}
	port := t.Port
	if port == 0 {
		port = v1alpha1.DefaultNVMeOFTCPPort
	}
	ident, err := export.For(id)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", id, err)
	}
	v := &v1alpha1.PillarVolumeState{
		ObjectMeta: metav1.ObjectMeta{Name: id, Finalizers: []string{Finalizer}, Annotations: map[string]string{}},
		Spec: v1alpha1.PillarVolumeStateSpec{
			VolumeID:  id,
			StoreName: v1alpha1.ObjectName(storeName),
			// Empty when the store could not be read: the record is then
			// matched by name, as one of an earlier release.
			StoreUID:              st.UID,
			ProtocolName:          v1alpha1.ObjectName(protoName),
			CapacityBytes:         size,
			DataSource:            ds,
			MultiNodeBlockWriters: params[v1alpha1.StorageClassParamMultiNodeBlockWriters] == "true",
			PublicationGeneration: 1,
			Export: &v1alpha1.ExportSpec{BindAddress: t.BindAddress, Port: port, ACLEnabled: ptr.To(t.ACLEnabled == nil || *t.ACLEnabled),
				SubsystemNQN: v1alpha1.NQN(ident.SubsystemNQN)},
		},
	}
	if n := params[paramPVCName]; n != "" {
		v.Annotations[AnnotationPVCName] = n
		v.Annotations[AnnotationPVCNamespace] = params[paramPVCNamespace]
	}
	if n := params[paramPVName]; n != "" {
		v.Annotations[AnnotationPVName] = n
	}
	if err := s.cfg.Client.Create(ctx, v); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, errLostRace
		}
		return nil, errorf(codes.Unavailable, id, "writing the PillarVolumeState: %v", err)
	}
	s.log.Info("volume recorded", "volume_id", id, "store", storeName, "protocol", protoName, "bytes", size,
		"pvc", v.Annotations[AnnotationPVCNamespace]+"/"+v.Annotations[AnnotationPVCName])
	return v, nil
}

// provision runs the steps the record does not show as done yet, under one
// token: the record's first generation when unspent says that v was just
// created by this call (record), else one issued now. One token for the
// create and the export is as safe as one for each (docs/architecture.md,
// "One token per CSI call"): no other call and no retry is ever handed it,
// and the agent refuses it once any later one was admitted. The record's
// status is written once, when both steps are done; an export that fails
// after the create records the create alone, and a restore or clone
// records its create at once, so that a retry does not need a source that
// may be gone by then.
func (s *Service) provision(ctx context.Context, v *v1alpha1.PillarVolumeState, r *csi.CapacityRange, unspent bool) (*v1alpha1.PillarVolumeState, error) {
	if v.Spec.Export == nil {
		return nil, errorf(codes.FailedPrecondition, v.Name, "the PillarVolumeState has no export spec (ExportSpecMissing): state bindAddress, port and aclEnabled as %s", recoveryDoc)
	}
	_, store, conn, err := s.storeOf(ctx, v)
	if err != nil {
		return nil, err
	}
	// The source first: a restore the agent cannot make costs no token.
	var cs *agentv1.ContentSource
	if !v.Status.BackendCreated && v.Spec.DataSource != nil {
		if cs, err = s.contentSource(ctx, v, conn.Agent); err != nil {
			return nil, err
		}
	}
	tok := tokenOf(v)
	if !unspent && !(v.Status.BackendCreated && v.Status.Exported) {
		if tok, err = s.issue(ctx, v); err != nil {
			return nil, err
		}
	}
	created := false
	if !v.Status.BackendCreated {
		resp, err := conn.Agent.CreateVolume(ctx, &agentv1.CreateVolumeRequest{FencingToken: tok, VolumeId: v.Name, Store: store,
			CapacityBytes: v.Spec.CapacityBytes, ContentSource: cs})
		if err != nil {
			return nil, s.agentError(v, "CreateVolume", err)
		}
		v.Status.BackendCreated, v.Status.CapacityBytes = true, resp.GetVolume().GetCapacityBytes()
		created = true
		s.storeChanged(v.Spec.StoreName)
		if v.Spec.DataSource != nil {
			// A restore or clone records its create at once: a retry
			// after a crash before the export must not need the source,
			// which may be gone by then.
			if err := s.writeStatus(ctx, v, v1alpha1.ReasonBackendCreated, "the backend volume exists"); err != nil {
				return nil, err
			}
			created = false
		}
	}
	if !fits(v.Status.CapacityBytes, r) {
		// No CO deletes a volume whose creation failed: roll it back.
		if err := s.rollBack(ctx, v); err != nil {
			return nil, err
		}
		return nil, errorf(codes.OutOfRange, v.Name, "the backend rounds the size to %d bytes, outside the requested range %d..%d; the volume was rolled back",
			v.Status.CapacityBytes, r.GetRequiredBytes(), r.GetLimitBytes())
	}
	if v.Status.Exported {
		return v, nil
	}
	e := v.Spec.Export
	_, err = conn.Agent.ExportVolume(ctx, &agentv1.ExportVolumeRequest{FencingToken: tok, VolumeId: v.Name, Store: store,
		SubsystemNqn: subsystemNQN(v),
		Transport:    &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: string(e.BindAddress), Port: uint32(e.Port), AclEnabled: *e.ACLEnabled}}})
	if err != nil {
		err = s.agentError(v, "ExportVolume", err)
		if created {
			// The create alone, so that the retry does not repeat it.
			_ = s.writeStatusDetached(ctx, v, v1alpha1.ReasonBackendCreated, "the backend volume exists; its export failed")
		}
		return nil, err
	}
	v.Status.Exported = true
	if err := s.writeStatusDetached(ctx, v, v1alpha1.ReasonExported, "provisioned and exported"); err != nil {
		return nil, err
	}
	s.event(v, corev1.EventTypeNormal, v1alpha1.ReasonProvisioned, "%d bytes in store %s, exported as %s on %s:%d (host ACLs %v)",
		v.Status.CapacityBytes, v.Spec.StoreName, subsystemNQN(v), e.BindAddress, e.Port, *e.ACLEnabled)
	return v, nil
}

// writeStatusDetached is writeStatus under a deadline of its own
// (recordTimeout) rather than the call's: the agent's work is done, and
// the call's deadline, which may be what ended it, must not keep it from
// being recorded. Failing to record it costs only a retry that repeats
// the (idempotent) agent calls under a new token.
func (s *Service) writeStatusDetached(ctx context.Context, v *v1alpha1.PillarVolumeState, reason, msg string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := s.writeStatus(ctx, v, reason, msg)
	if err != nil {
		s.log.Info("the agent's work is not recorded; a retry repeats it", "volume_id", v.Name, "reason", reason, "error", err)
	}
	return err
}

// recordTimeout bounds writeStatusDetached's write. It is generous because
// giving up is costly: the call fails, and its retry waits out the
// provisioner's backoff and repeats the agent's work. In a burst of 40
// claims in the lab cluster, whose API server saturated its emulated CPU,
// 8 of these writes took longer than the 10 s this was before.
const recordTimeout = time.Minute

// rollBack deletes the record of a volume whose creation cannot succeed,
// through the same teardown as DeleteVolume.
func (s *Service) rollBack(ctx context.Context, v *v1alpha1.PillarVolumeState) error {
	if err := s.cfg.Client.Delete(ctx, v); client404(err) != nil {
		return errorf(codes.Unavailable, v.Name, "rolling back: %v", err)
	}
	return s.retrying(ctx, v.Name, func(v *v1alpha1.PillarVolumeState) error {
		if v == nil {
			return nil
		}
		return s.teardown(ctx, v)
	})
}

// writeStatus records a confirmed step. A lost race means the step's result
// is not recorded yet: the caller re-reads and repeats the (idempotent)
// agent call under a new token.
func (s *Service) writeStatus(ctx context.Context, v *v1alpha1.PillarVolumeState, reason, msg string) error {
	st := metav1.ConditionFalse
	if v.Status.BackendCreated && v.Status.Exported {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&v.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: st, Reason: reason, Message: msg, ObservedGeneration: v.Generation})
	v.Status.ObservedGeneration = v.Generation
	if err := s.cfg.Client.Status().Update(ctx, v); err != nil {
		if apierrors.IsConflict(err) {
			return errLostRace
		}
		return errorf(codes.Unavailable, v.Name, "recording %s: %v", reason, err)
	}
	return nil
}

// volumeContext is what pillar-node needs to connect: the target address
// and port, the subsystem, and the protocol's connect options. An
// unspecified bind address (every address of the node) is reached at the
// agent's address.
func (s *Service) volumeContext(ctx context.Context, v *v1alpha1.PillarVolumeState) (map[string]string, error) {
	e := v.Spec.Export
	addr, err := netip.ParseAddr(string(e.BindAddress))
	if err != nil {
		return nil, errorf(codes.FailedPrecondition, v.Name, "export bind address %q: %v", e.BindAddress, err)
	}
	var opts export.ConnectOptions
	if v.Spec.ProtocolName != "" {
		// The connect options go into the PersistentVolume for good: a
		// failed read fails the call rather than leave them out.
		var p v1alpha1.PillarProtocol
		err := s.cfg.Client.Get(ctx, types.NamespacedName{Name: string(v.Spec.ProtocolName)}, &p)
		switch {
		case apierrors.IsNotFound(err):
			return nil, errorf(codes.FailedPrecondition, v.Name, "PillarProtocol %q of the volume does not exist: its connect options cannot be given", v.Spec.ProtocolName)
		case err != nil:
			return nil, errorf(codes.Unavailable, v.Name, "reading PillarProtocol %q for the volume's connect options: %v", v.Spec.ProtocolName, err)
		}
		if p.Spec.NVMeOFTCP != nil && p.Spec.NVMeOFTCP.Connect != nil {
			c := p.Spec.NVMeOFTCP.Connect
			opts = export.ConnectOptions{CtrlLossTimeoutSeconds: c.CtrlLossTimeoutSeconds, ReconnectDelaySeconds: c.ReconnectDelaySeconds,
				KeepAliveTimeoutSeconds: c.KeepAliveTimeoutSeconds, NrIOQueues: c.NrIOQueues, QueueSize: c.QueueSize}
		}
	}
	if addr.IsUnspecified() {
		_, _, conn, err := s.storeOf(ctx, v)
		if err != nil {
			return nil, err
		}
		host, _, _ := cutPort(conn.Endpoint())
		if addr, err = netip.ParseAddr(host); err != nil {
			return nil, errorf(codes.FailedPrecondition, v.Name, "the export listens on every address and the agent's address %q is not an IP address: set the PillarProtocol's bindAddress", host)
		}
	}
	return export.VolumeContext{Transport: export.TransportTCP, Address: addr, Port: uint16(e.Port), SubsystemNQN: subsystemNQN(v), Connect: opts}.Map(), nil
}
