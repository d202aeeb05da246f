package server

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/fencing"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GetCapacity reports the space of one store.
func (s *Server) GetCapacity(ctx context.Context, req *agentv1.GetCapacityRequest) (*agentv1.GetCapacityResponse, error) {
	b, spec, err := s.backend("GetCapacity", req.GetStore())
	if err != nil {
		return nil, err
	}
	c, err := b.Capacity(ctx)
	if err != nil {
		s.log.Warn("capacity failed", "store", spec.String(), "error", err)
		return nil, toStatus(ctx, "GetCapacity "+spec.String(), "", err)
	}
	return &agentv1.GetCapacityResponse{TotalBytes: c.TotalBytes, AvailableBytes: c.AvailableBytes}, nil
}

// CreateVolume creates the backend volume of a new volume. The first
// accepted call for a volume ID starts the token's lifecycle.
func (s *Server) CreateVolume(ctx context.Context, req *agentv1.CreateVolumeRequest) (*agentv1.CreateVolumeResponse, error) {
	const op = "CreateVolume"
	id := req.GetVolumeId()
	b, spec, err := s.sized(op, id, req.GetCapacityBytes(), req.GetStore())
	if err != nil {
		return nil, err
	}
	log := s.log.With("volume_id", id, "store", spec.String())
	size := req.GetCapacityBytes()
	var times createTimes
	ctx = withCreateTimes(ctx, &times)
	fences := []fence{{key: id, kind: fencing.KindMutate, token: req.GetFencingToken(), exists: s.exists(b, id)}}
	var create func(context.Context) (*backends.Volume, error)
	if cs := req.GetContentSource(); cs != nil {
		f, c, err := s.contentSource(ctx, b, id, size, cs)
		if err != nil {
			return nil, err
		}
		fences, create = append(fences, f), c
		log = log.With("content_source", f.key)
	}
	var vol *backends.Volume
	err = s.fencedAll(ctx, op, fences, func(ctx context.Context) error {
		var v *backends.Volume
		var err error
		if create != nil {
			// The backend tells a retry (the volume it made) from a
			// clash (ErrConflict) itself.
			v, err = create(ctx)
			if backends.IsShrink(err) {
				return status.Errorf(codes.OutOfRange, "%s volume %q: %v", op, id, err)
			}
		} else {
			// Create first: on the common path (a new volume) that is
			// one command. Only a conflict needs a look at what exists,
			// to tell a retry (at least as large: reported as is) from
			// a clash.
			v, err = b.Create(ctx, id, size)
			if backends.IsConflict(err) {
				got, gerr := b.Get(ctx, id)
				switch {
				case gerr == nil && got.SizeBytes >= size:
					v, err = got, nil
				case gerr == nil:
					return status.Errorf(codes.AlreadyExists, "%s volume %q: exists with %d bytes, less than the %d requested",
						op, id, got.SizeBytes, size)
				}
			}
		}
		if err != nil {
			log.Error("create failed", "bytes", size, "error", err)
			return toStatus(ctx, op, id, err)
		}
		vol = withDevice(ctx, log, b, id, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.noteVolume(id, true)
	attrs := []any{"bytes", vol.SizeBytes, "name", vol.Name, "device", vol.DevicePath}
	if create == nil { // a clone's or a restore's backend calls are not timed
		attrs = append(attrs, "slot_wait_seconds", times.slotWait.Seconds(), "create_seconds", times.create.Seconds())
	}
	log.Info("volume created", attrs...)
	return &agentv1.CreateVolumeResponse{Volume: volumeProto(id, vol)}, nil
}

// withDevice returns v with its device path, looked up through the
// backend when v lacks it (a zvol's node appears after zfs create
// returns; DevicePath waits for it, as the export that follows would). A
// lookup that fails leaves the path empty: the volume exists, which is
// what the call reports, and the export names the failure.
func withDevice(ctx context.Context, log *slog.Logger, b backends.Backend, id string, v *backends.Volume) *backends.Volume {
	if v.DevicePath != "" {
		return v
	}
	dev, err := b.DevicePath(ctx, id)
	if err != nil {
		log.Warn("device lookup failed; the volume is reported without its device", "error", err)
		return v
	}
	w := *v
	w.DevicePath = dev
	return &w
}

func volumeProto(id string, v *backends.Volume) *agentv1.Volume {
	return &agentv1.Volume{VolumeId: id, CapacityBytes: v.SizeBytes, DevicePath: v.DevicePath}
}

// DeleteVolume removes the volume's export and destroys the volume, after
// ending its lifecycle: the tombstone is durable before anything is
// destroyed, so no request of the lifecycle can race the deletion, and a
// retry of the same token (rule 14 of the fencing table) finishes a
// deletion that failed half-way.
func (s *Server) DeleteVolume(ctx context.Context, req *agentv1.DeleteVolumeRequest) (*agentv1.DeleteVolumeResponse, error) {
	const op = "DeleteVolume"
	id := req.GetVolumeId()
	if err := validateVolumeID(op, id); err != nil {
		return nil, err
	}
	b, spec, err := s.backend(op, req.GetStore())
	if err != nil {
		return nil, err
	}
	log := s.log.With("volume_id", id, "store", spec.String())
	ident, _ := export.For(id) // id is valid
	err = s.fenced(ctx, op, id, fencing.KindEnd, req.GetFencingToken(), s.exists(b, id), func(ctx context.Context) error {
		// The export first: nvmet holds the device open, and ZFS and LVM
		// refuse to destroy an open volume.
		if err := s.nvmet.Remove(ctx, ident.SubsystemNQN); err != nil {
			log.Error("unexport before delete failed", "nqn", ident.SubsystemNQN, "error", err)
			return toStatus(ctx, op, id, err)
		}
		s.noteExport(ident.SubsystemNQN, false)
		s.forgetApplied(ident.SubsystemNQN)
		if err := b.Delete(ctx, id); err != nil {
			log.Error("delete failed", "error", err)
			return toStatus(ctx, op, id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.noteVolume(id, false)
	log.Info("volume deleted")
	return &agentv1.DeleteVolumeResponse{}, nil
}

// ExpandVolume grows a volume and, when it is exported, has nvmet
// revalidate the namespace's size so connected initiators learn it.
func (s *Server) ExpandVolume(ctx context.Context, req *agentv1.ExpandVolumeRequest) (*agentv1.ExpandVolumeResponse, error) {
	const op = "ExpandVolume"
	id := req.GetVolumeId()
	b, spec, err := s.sized(op, id, req.GetCapacityBytes(), req.GetStore())
	if err != nil {
		return nil, err
	}
	log := s.log.With("volume_id", id, "store", spec.String())
	ident, _ := export.For(id)
	var vol *backends.Volume
	err = s.fenced(ctx, op, id, fencing.KindMutate, req.GetFencingToken(), s.exists(b, id), func(ctx context.Context) error {
		v, err := b.Get(ctx, id)
		if err != nil {
			return toStatus(ctx, op, id, err)
		}
		if v.SizeBytes < req.GetCapacityBytes() {
			// Never shrink: only a larger size reaches the backend.
			if v, err = b.Expand(ctx, id, req.GetCapacityBytes()); err != nil {
				log.Error("expand failed", "bytes", req.GetCapacityBytes(), "error", err)
				return toStatus(ctx, op, id, err)
			}
			log.Info("volume expanded", "bytes", v.SizeBytes)
		}
		vol = withDevice(ctx, log, b, id, v)
		if err := s.revalidate(ctx, ident); err != nil {
			log.Error("namespace size revalidation failed", "nqn", ident.SubsystemNQN, "error", err)
			return toStatus(ctx, op, id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.noteVolume(id, true)
	return &agentv1.ExpandVolumeResponse{Volume: volumeProto(id, vol)}, nil
}

// ListVolumes lists the pillar-csi volumes of one store.
func (s *Server) ListVolumes(ctx context.Context, req *agentv1.ListVolumesRequest) (*agentv1.ListVolumesResponse, error) {
	b, spec, err := s.backend("ListVolumes", req.GetStore())
	if err != nil {
		return nil, err
	}
	vols, err := b.List(ctx)
	if err != nil {
		return nil, toStatus(ctx, "ListVolumes "+spec.String(), "", err)
	}
	all := make([]*agentv1.Volume, 0, len(vols))
	for _, v := range vols {
		s.noteVolume(v.ID, true)
		all = append(all, volumeProto(v.ID, &v))
	}
	slices.SortFunc(all, func(a, b *agentv1.Volume) int { return strings.Compare(a.VolumeId, b.VolumeId) })
	volumes, next, err := page("ListVolumes", all, (*agentv1.Volume).GetVolumeId, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &agentv1.ListVolumesResponse{Volumes: volumes, NextPageToken: next}, nil
}

// sized validates a request that sizes a volume and returns its store's
// backend.
func (s *Server) sized(op, id string, size int64, st *agentv1.Store) (backends.Backend, storeSpec, error) {
	if err := validateVolumeID(op, id); err != nil {
		return nil, storeSpec{}, err
	}
	if size <= 0 {
		return nil, storeSpec{}, status.Errorf(codes.InvalidArgument, "%s volume %q: capacity_bytes %d must be greater than zero", op, id, size)
	}
	return s.backend(op, st)
}

// backend returns the backend of a request's store, or INVALID_ARGUMENT
// when the store cannot be valid.
func (s *Server) backend(op string, st *agentv1.Store) (backends.Backend, storeSpec, error) {
	spec, err := parseStore(st)
	if err != nil {
		return nil, spec, status.Errorf(codes.InvalidArgument, "%s: %v", op, err)
	}
	b, err := s.stores.get(spec)
	if err != nil {
		return nil, spec, status.Errorf(codes.InvalidArgument, "%s: store %q: %v", op, st.GetName(), err)
	}
	return b, spec, nil
}

func validateVolumeID(op, id string) error {
	if err := export.ValidateVolumeID(id); err != nil {
		return status.Errorf(codes.InvalidArgument, "%s: volume_id %q: %v", op, id, err)
	}
	return nil
}

// subsystemNQN checks a request's subsystem NQN: empty or the one
// api/export derives from the volume ID. The agent never invents
// identifiers and owns only subsystems under the pillar-csi prefix, so any
// other NQN would be one it could neither list nor reconcile.
func subsystemNQN(op string, ident export.Identity, nqn string) error {
	if nqn == "" || nqn == ident.SubsystemNQN {
		return nil
	}
	return status.Error(codes.InvalidArgument, fmt.Sprintf("%s volume %q: subsystem_nqn %q is not the volume's NQN %q; leave it empty",
		op, ident.VolumeID, nqn, ident.SubsystemNQN))
}
