package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/fencing"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Model is the attr_model of every subsystem the agent creates, so that an
// operator looking at configfs or at `nvme list` on a worker sees whose
// export it is. Ownership itself is the NQN prefix (export.SubsystemNQNPrefix).
const Model = "pillar-csi"

// rollbackTimeout bounds the removal of a half-made export after a failed
// ExportVolume, which runs even when the caller's context has ended.
const rollbackTimeout = 30 * time.Second

// tcpTransport is a validated NvmeofTcpExport.
type tcpTransport struct {
	addr configfs.Address
	acl  bool
}

func parseTCP(op, id string, t *agentv1.NvmeofTcpExport) (tcpTransport, error) {
	if t == nil {
		return tcpTransport{}, status.Errorf(codes.InvalidArgument, "%s volume %q: transport nvmeof_tcp is required", op, id)
	}
	ip := net.ParseIP(t.GetBindAddress())
	if ip == nil {
		return tcpTransport{}, status.Errorf(codes.InvalidArgument, "%s volume %q: bind_address %q is not an IPv4 or IPv6 address", op, id, t.GetBindAddress())
	}
	if t.GetPort() < 1 || t.GetPort() > 65535 {
		return tcpTransport{}, status.Errorf(codes.InvalidArgument, "%s volume %q: port %d is outside 1..65535", op, id, t.GetPort())
	}
	fam := "ipv6"
	if ip.To4() != nil {
		fam = "ipv4"
	}
	return tcpTransport{
		addr: configfs.Address{TrType: "tcp", AdrFam: fam, TrAddr: ip.String(), TrSvcID: strconv.FormatUint(uint64(t.GetPort()), 10)},
		acl:  t.GetAclEnabled(),
	}, nil
}

// desiredExport is the nvmet export of one volume: one subsystem named by
// the volume's NQN, one namespace (NSID 1) on the volume's device with the
// UUID and NGUID of the api/export contract, linked to one TCP port, and
// either open to any host or limited to hosts.
func desiredExport(ident export.Identity, device string, t tcpTransport, hosts []string) configfs.Export {
	e := configfs.Export{
		NQN: ident.SubsystemNQN,
		Attrs: configfs.SubsystemAttrs{
			AllowAnyHost: !t.acl,
			Model:        Model,
			Serial:       serialOf(ident),
		},
		Namespaces: []configfs.Namespace{{
			NSID:        ident.NamespaceID,
			DevicePath:  device,
			DeviceUUID:  ident.UUID,
			DeviceNGUID: ident.NGUID,
			Enabled:     true,
		}},
		Ports: []configfs.Address{t.addr},
	}
	if t.acl {
		e.AllowedHosts = slices.Clone(hosts)
	}
	return e
}

// serialOf is the subsystem's serial number: the first 20 hex digits of
// the volume's NGUID. Deriving it keeps it the same when configfs is
// rebuilt after a reboot, so an initiator that reconnects sees the same
// controller identity; nvmet's default is random.
func serialOf(ident export.Identity) string {
	return strings.ReplaceAll(ident.NGUID, "-", "")[:20]
}

// apply makes e true in configfs. If the subsystem did not exist before
// and Apply fails, what it made is removed again, so a failed export
// leaves nothing behind; an export that existed is left for the retry to
// converge (Apply continues from any state).
func (s *Server) apply(ctx context.Context, log *slog.Logger, e configfs.Export, existed bool) error {
	err := s.nvmet.Apply(ctx, e)
	if err == nil {
		s.noteExport(e.NQN, true)
		s.noteApplied(e)
		return nil
	}
	if !existed {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rerr := s.nvmet.Remove(rctx, e.NQN); rerr != nil {
			log.Error("rollback of a failed export failed; a retry converges it", "nqn", e.NQN, "error", rerr)
			s.noteExport(e.NQN, true)
		} else {
			log.Info("rolled back a failed export", "nqn", e.NQN)
		}
	}
	return err
}

// ExportVolume makes the volume reachable over NVMe-oF/TCP.
func (s *Server) ExportVolume(ctx context.Context, req *agentv1.ExportVolumeRequest) (*agentv1.ExportVolumeResponse, error) {
	e, err := s.export(ctx, "ExportVolume", exportArgs{
		id: req.GetVolumeId(), store: req.GetStore(), nqn: req.GetSubsystemNqn(),
		tcp: req.GetNvmeofTcp(), token: req.GetFencingToken(),
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.ExportVolumeResponse{Export: e}, nil
}

// exportArgs is one export request: ExportVolume's, or one entry of
// Reconcile.
type exportArgs struct {
	id    string
	store *agentv1.Store
	nqn   string
	tcp   *agentv1.NvmeofTcpExport
	token *agentv1.FencingToken
	// hosts is the exact access list (Reconcile) when exactHosts is set;
	// otherwise the access list is left as it is (ExportVolume).
	hosts      []string
	exactHosts bool
}

// exportPlan is a validated export request.
type exportPlan struct {
	ident   export.Identity
	tcp     tcpTransport
	backend backends.Backend
	spec    storeSpec
}

// checkExport validates an export request: everything that can be
// refused as INVALID_ARGUMENT is, before the fencing store sees the token.
func (s *Server) checkExport(op string, a exportArgs) (exportPlan, error) {
	if err := validateVolumeID(op, a.id); err != nil {
		return exportPlan{}, err
	}
	ident, _ := export.For(a.id)
	if err := subsystemNQN(op, ident, a.nqn); err != nil {
		return exportPlan{}, err
	}
	t, err := parseTCP(op, a.id, a.tcp)
	if err != nil {
		return exportPlan{}, err
	}
	if a.exactHosts && t.acl {
		for _, h := range a.hosts {
			if err := validHostNQN(op, a.id, "allowed_host_nqns", h); err != nil {
				return exportPlan{}, err
			}
		}
	}
	b, spec, err := s.backend(op, a.store)
	if err != nil {
		return exportPlan{}, err
	}
	return exportPlan{ident: ident, tcp: t, backend: b, spec: spec}, nil
}

func (s *Server) export(ctx context.Context, op string, a exportArgs) (*agentv1.Export, error) {
	id := a.id
	p, err := s.checkExport(op, a)
	if err != nil {
		return nil, err
	}
	ident, t, b, spec := p.ident, p.tcp, p.backend, p.spec
	log := s.log.With("volume_id", id, "store", spec.String())
	var out configfs.Export
	err = s.fenced(ctx, op, id, fencing.KindMutate, a.token, s.exists(b, id), func(ctx context.Context) error {
		// The device is looked up on every call: after a reboot a zvol
		// may come back as another /dev/zdN.
		dev, err := b.DevicePath(ctx, id)
		if err != nil {
			log.Error("device lookup failed", "op", op, "error", err)
			return toStatus(ctx, op, id, err)
		}
		cur, existed, err := s.nvmet.ReadSubsystem(ctx, ident.SubsystemNQN)
		if err != nil {
			return toStatus(ctx, op, id, err)
		}
		hosts := cur.AllowedHosts
		if a.exactHosts {
			hosts = dedup(a.hosts)
		}
		// Without exactHosts the access list stays as it is (AllowHost
		// and DenyHost own it); nvmet drops it when the export opens up.
		out = desiredExport(ident, dev, t, hosts)
		if err := s.apply(ctx, log, out, existed); err != nil {
			log.Error("export failed", "op", op, "nqn", ident.SubsystemNQN, "device", dev, "error", err)
			return toStatus(ctx, op, id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.noteVolume(id, true)
	log.Info("volume exported", "op", op, "nqn", ident.SubsystemNQN, "device", out.Namespaces[0].DevicePath,
		"address", t.addr.String(), "acl", t.acl)
	return exportProto(id, out), nil
}

func dedup(hosts []string) []string {
	out := slices.Clone(hosts)
	slices.Sort(out)
	return slices.Compact(out)
}

// exportProto describes a pillar-owned export: the one the agent just
// applied, or one as configfs has it (ListExports), where the namespace
// identifiers are what the kernel holds, so drift is visible.
func exportProto(id string, e configfs.Export) *agentv1.Export {
	out := &agentv1.Export{VolumeId: id, SubsystemNqn: e.NQN}
	for _, ns := range e.Namespaces {
		if ns.NSID == export.NamespaceID {
			out.NamespaceId, out.NamespaceUuid, out.NamespaceNguid = ns.NSID, ns.DeviceUUID, ns.DeviceNGUID
		}
	}
	for _, a := range e.Ports {
		if a.TrType != "tcp" {
			continue
		}
		port, _ := strconv.ParseUint(a.TrSvcID, 10, 16)
		out.Transport = &agentv1.Export_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{
			BindAddress: a.TrAddr, Port: uint32(port), AclEnabled: !e.Attrs.AllowAnyHost}}
		break
	}
	if !e.Attrs.AllowAnyHost {
		out.AllowedHostNqns = slices.Clone(e.AllowedHosts)
	}
	return out
}

// UnexportVolume removes the volume's subsystem, namespace, allowed hosts
// and port link, and ports nothing else uses.
func (s *Server) UnexportVolume(ctx context.Context, req *agentv1.UnexportVolumeRequest) (*agentv1.UnexportVolumeResponse, error) {
	const op = "UnexportVolume"
	id := req.GetVolumeId()
	if err := validateVolumeID(op, id); err != nil {
		return nil, err
	}
	ident, _ := export.For(id)
	if err := subsystemNQN(op, ident, req.GetSubsystemNqn()); err != nil {
		return nil, err
	}
	log := s.log.With("volume_id", id)
	err := s.fenced(ctx, op, id, fencing.KindMutate, req.GetFencingToken(), s.exists(nil, id), func(ctx context.Context) error {
		if err := s.nvmet.Remove(ctx, ident.SubsystemNQN); err != nil {
			log.Error("unexport failed", "nqn", ident.SubsystemNQN, "error", err)
			return toStatus(ctx, op, id, err)
		}
		s.noteExport(ident.SubsystemNQN, false)
		s.forgetApplied(ident.SubsystemNQN)
		return nil
	})
	if err != nil {
		return nil, err
	}
	log.Info("volume unexported", "nqn", ident.SubsystemNQN)
	return &agentv1.UnexportVolumeResponse{}, nil
}

// AllowHost adds a host to the subsystem's access list.
func (s *Server) AllowHost(ctx context.Context, req *agentv1.AllowHostRequest) (*agentv1.AllowHostResponse, error) {
	err := s.changeHosts(ctx, "AllowHost", req.GetVolumeId(), req.GetSubsystemNqn(), req.GetHostNqn(), req.GetFencingToken(), true)
	if err != nil {
		return nil, err
	}
	return &agentv1.AllowHostResponse{}, nil
}

// DenyHost removes a host from the subsystem's access list and ends the
// connection it has: configfs.Apply drops and makes again the subsystem's
// port links when the list narrows.
func (s *Server) DenyHost(ctx context.Context, req *agentv1.DenyHostRequest) (*agentv1.DenyHostResponse, error) {
	err := s.changeHosts(ctx, "DenyHost", req.GetVolumeId(), req.GetSubsystemNqn(), req.GetHostNqn(), req.GetFencingToken(), false)
	if err != nil {
		return nil, err
	}
	return &agentv1.DenyHostResponse{}, nil
}

// checkHosts validates an access-list request before the fencing store
// sees the token.
func checkHosts(op, id, nqn, host string) (export.Identity, error) {
	if err := validateVolumeID(op, id); err != nil {
		return export.Identity{}, err
	}
	ident, _ := export.For(id)
	if err := subsystemNQN(op, ident, nqn); err != nil {
		return export.Identity{}, err
	}
	if err := validHostNQN(op, id, "host_nqn", host); err != nil {
		return export.Identity{}, err
	}
	return ident, nil
}

// validHostNQN checks a host NQN against both contracts it must meet: the
// api's (export.ValidateNQN, which node IDs and the CRDs use) and the
// kernel's (configfs.ValidateNQN), which is stricter: at most 222 bytes,
// domain labels of at most 63 characters, a well-formed UUID in the UUID
// form. A host only the first accepts would pass here and be refused by
// configfs after the token had advanced the volume's mark.
func validHostNQN(op, id, field, host string) error {
	err := export.ValidateNQN(host)
	if err == nil {
		err = configfs.ValidateNQN(host)
	}
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%s volume %q: %s: %v", op, id, field, err)
	}
	return nil
}

func (s *Server) changeHosts(ctx context.Context, op, id, nqn, host string, pt *agentv1.FencingToken, allow bool) error {
	ident, err := checkHosts(op, id, nqn, host)
	if err != nil {
		return err
	}
	log := s.log.With("volume_id", id)
	return s.fenced(ctx, op, id, fencing.KindMutate, pt, s.exists(nil, id), func(ctx context.Context) error {
		// One export, not the whole tree: an access-list change runs on
		// every ControllerPublish and must not cost more with every
		// volume the node exports.
		e, ok, err := s.nvmet.ReadExport(ctx, ident.SubsystemNQN)
		if err != nil {
			return toStatus(ctx, op, id, err)
		}
		switch {
		case !ok && allow:
			return status.Errorf(codes.NotFound, "%s volume %q: not exported (no subsystem %s)", op, id, ident.SubsystemNQN)
		case !ok:
			return nil // not exported: the host cannot connect
		case e.Attrs.AllowAnyHost:
			// nvmet refuses access-list links while allow_any_host is
			// set, and every host may connect anyway.
			return nil
		case allow && len(e.Ports) == 0:
			// An export linked to no port: an ExportVolume that failed
			// half-way, or an agent that died while a narrowing had
			// the links dropped. The host could not connect; the
			// retried ExportVolume, or the controller's Reconcile of
			// the restarted agent, links it again.
			return status.Errorf(codes.Unavailable, "%s volume %q: the export is linked to no port yet (an export or access change did not finish); retry once it is exported again", op, id)
		}
		has := slices.Contains(e.AllowedHosts, host)
		switch {
		case allow && has, !allow && !has:
			return nil
		case allow:
			e.AllowedHosts = append(e.AllowedHosts, host)
		default:
			e.AllowedHosts = slices.DeleteFunc(e.AllowedHosts, func(h string) bool { return h == host })
		}
		if err := s.nvmet.Apply(ctx, e); err != nil {
			log.Error("access list change failed", "op", op, "host_nqn", host, "error", err)
			return toStatus(ctx, op, id, err)
		}
		s.noteApplied(e)
		log.Info("access list changed", "op", op, "host_nqn", host)
		return nil
	})
}

// ListExports lists the pillar-owned exports on the node.
func (s *Server) ListExports(ctx context.Context, req *agentv1.ListExportsRequest) (*agentv1.ListExportsResponse, error) {
	st, err := s.nvmet.Read(ctx)
	if err != nil {
		return nil, toStatus(ctx, "ListExports", "", err)
	}
	s.noteExports(st)
	var all []*agentv1.Export
	for _, sub := range st.Subsystems {
		if id, ok := ownedVolumeID(sub.NQN); ok {
			e, _ := st.Export(sub.NQN)
			all = append(all, exportProto(id, e))
		}
	}
	slices.SortFunc(all, func(a, b *agentv1.Export) int { return strings.Compare(a.VolumeId, b.VolumeId) })
	exports, next, err := page("ListExports", all, (*agentv1.Export).GetVolumeId, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &agentv1.ListExportsResponse{Exports: exports, NextPageToken: next}, nil
}

// revalidate asks nvmet to re-read the size of an exported volume's
// namespace, so connected initiators get a namespace-changed event. A
// volume that is not exported needs nothing (IsNotExist), and neither does
// one whose namespace is disabled (an export a killed agent left
// half-made): nvmet refuses revalidate_size there with EINVAL, and reads
// the device's size anyway when the namespace is enabled, which the
// retried ExportVolume does. Nor does a kernel without revalidate_size
// (before Linux 5.11): initiators see the size at their next identify, and
// nothing the agent does would tell them sooner.
func (s *Server) revalidate(ctx context.Context, ident export.Identity) error {
	err := s.nvmet.RevalidateSize(ctx, ident.SubsystemNQN, ident.NamespaceID)
	if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EINVAL) || configfs.IsNotExist(err) {
		return nil
	}
	return err
}
