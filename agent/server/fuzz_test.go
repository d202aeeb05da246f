package server

import (
	"maps"
	"strings"
	"testing"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/configfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fuzzServer is a Server with just what request validation needs: the real
// backend factory (which validates store names and properties and runs no
// command until asked to) and no fencing store, nvmet or logger, which
// validation must not touch.
func fuzzServer() *Server {
	return &Server{stores: newStoreCache(realBackends(command.Exec{}, nil), 1)}
}

// fuzzStore builds a request's Store from flat fuzz fields.
func fuzzStore(kind uint8, name, pool, parent, propKey, propValue, vg, thin string) *agentv1.Store {
	switch kind % 4 {
	case 0:
		return nil
	case 1:
		z := &agentv1.ZfsStore{Pool: pool, ParentDataset: parent}
		if propKey != "" || propValue != "" {
			z.Properties = map[string]string{propKey: propValue}
		}
		return &agentv1.Store{Name: name, Backend: &agentv1.Store_Zfs{Zfs: z}}
	case 2:
		return &agentv1.Store{Name: name, Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{VolumeGroup: vg, ThinPool: thin}}}
	}
	return &agentv1.Store{Name: name} // no backend
}

// wantInvalidArgument fails unless err is an INVALID_ARGUMENT status:
// request validation refuses nothing else.
func wantInvalidArgument(t *testing.T, what string, err error) {
	t.Helper()
	if st, ok := status.FromError(err); !ok || st.Code() != codes.InvalidArgument {
		t.Fatalf("%s refused with %v, not INVALID_ARGUMENT", what, err)
	}
}

// FuzzExportRequest holds the validation of ExportVolume and Reconcile
// entries, which runs before the fencing check, to one property: a
// request is either refused with INVALID_ARGUMENT, or everything it
// becomes is accepted downstream. configfs normalizes the export the agent
// builds from it, and the store's backend is built. Otherwise a request
// would be admitted by the fencing store, advance the volume's mark, and
// only then fail.
func FuzzExportRequest(f *testing.F) {
	host := "nqn.2014-08.org.nvmexpress:uuid:5f3a6c1e-1111-4c2d-9e2f-000000000001"
	f.Add("pvc-1", "", "192.0.2.10", uint32(4420), true, host, "", true, uint8(2), "fast", "", "", "", "", "vg0", "")
	f.Add("pvc-1", "nqn.2026-01.io.pillar-csi:volume:pvc-1", "fd00::10", uint32(65535), false, "", "", false, uint8(1), "z", "tank", "k8s", "compression", "lz4", "", "")
	f.Add("pvc-1", "nqn.2026-01.io.pillar-csi:volume:pvc-2", "::ffff:192.0.2.10", uint32(0), true, host, host, true, uint8(1), "z", "tank", "", "a=b", "", "", "")
	f.Add("pvc-1", "", "0.0.0.0", uint32(65536), true, "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid", "", true, uint8(2), "", "", "", "", "", "vg0", "thin")
	f.Add("pvc-1", "", "fe80::1%eth0", uint32(4420), true, "nqn.2014-08.org."+strings.Repeat("a", 64)+":x", "", true, uint8(3), "", "", "", "", "", "", "")
	f.Add("Bad_ID", "", "010.0.0.1", uint32(4420), true, "", "", false, uint8(0), "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, id, nqn, bindAddress string, port uint32, acl bool, host1, host2 string, exact bool,
		kind uint8, name, pool, parent, propKey, propValue, vg, thin string) {
		var hosts []string
		for _, h := range []string{host1, host2} {
			if h != "" {
				hosts = append(hosts, h)
			}
		}
		a := exportArgs{
			id: id, nqn: nqn, store: fuzzStore(kind, name, pool, parent, propKey, propValue, vg, thin),
			tcp:   &agentv1.NvmeofTcpExport{BindAddress: bindAddress, Port: port, AclEnabled: acl},
			hosts: hosts, exactHosts: exact,
		}
		p, err := fuzzServer().checkExport("ExportVolume", a)
		if err != nil {
			wantInvalidArgument(t, "checkExport", err)
			return
		}
		if p.backend == nil || p.ident.VolumeID != id {
			t.Fatalf("accepted without a backend or for another volume: %+v", p)
		}
		if !exact {
			hosts = nil // the access list stays what configfs has
		}
		e := desiredExport(p.ident, "/dev/zd0", p.tcp, dedup(hosts))
		if _, err := e.Normalize(); err != nil {
			t.Fatalf("accepted a request whose export configfs refuses: %v", err)
		}
		if z := a.store.GetZfs(); z != nil && !maps.Equal(p.spec.zfsProperties(), z.GetProperties()) &&
			len(z.GetProperties())+len(p.spec.zfsProperties()) > 0 {
			t.Fatalf("zfs properties %v came back from the store spec as %v", z.GetProperties(), p.spec.zfsProperties())
		}
	})
}

// FuzzHostRequest is FuzzExportRequest for AllowHost and DenyHost: an
// accepted host can be put on an export's access list.
func FuzzHostRequest(f *testing.F) {
	f.Add("pvc-1", "", "nqn.2014-08.org.nvmexpress:uuid:5f3a6c1e-1111-4c2d-9e2f-000000000001")
	f.Add("pvc-1", "nqn.2026-01.io.pillar-csi:volume:pvc-1", "nqn.2014-08.org.example:h")
	f.Add("pvc-1", "", "nqn.2014-08.org.nvmexpress:uuid:zz")
	f.Add("pvc-1", "", "nqn.2014-08.org.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:x")
	f.Add("pvc-1", "", "nqn.2014-08.org.nvmexpress.discovery")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, id, nqn, host string) {
		ident, err := checkHosts("AllowHost", id, nqn, host)
		if err != nil {
			wantInvalidArgument(t, "checkHosts", err)
			return
		}
		tcp := tcpTransport{addr: configfs.Address{TrType: "tcp", AdrFam: "ipv4", TrAddr: "192.0.2.10", TrSvcID: "4420"}, acl: true}
		if _, err := desiredExport(ident, "/dev/zd0", tcp, []string{host}).Normalize(); err != nil {
			t.Fatalf("accepted host %q, which configfs refuses: %v", host, err)
		}
		if export.ValidateNQN(host) != nil {
			t.Fatalf("accepted host %q, which the api refuses", host)
		}
	})
}

// The controller and pillar-node validate NQNs with api/export, the
// agent writes them with configfs: an NQN one accepts and the other
// refuses would pass every check up to the storage node and fail there.
// Around the length limit both must answer alike (the kernel lab proves
// configfs's limit in configfs/kerneltest).
func TestNQNLengthLimitsAgree(t *testing.T) {
	const prefix = "nqn.2014-08.org.example:"
	for _, n := range []int{export.MaxNQNLength - 1, export.MaxNQNLength, export.MaxNQNLength + 1, configfs.MaxNQNLen + 1} {
		nqn := prefix + strings.Repeat("x", n-len(prefix))
		api, kernel := export.ValidateNQN(nqn), configfs.ValidateNQN(nqn)
		if (api == nil) != (kernel == nil) {
			t.Errorf("an NQN of %d bytes: api/export says %v, configfs says %v", n, api, kernel)
		}
	}
}

// uuid-host-nqn in testdata/fuzz/FuzzExportRequest and FuzzHostRequest: a
// host NQN that api/export accepts and configfs refuses passed validation,
// was admitted by the fencing store (advancing the volume's mark) and
// only then failed in configfs. It is refused before the fencing check
// now, and the mark stays where it was.
func TestHostNQNConfigfsRefusesIsRefusedBeforeFencing(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-1"
	h.mustCreateExport(id, tok(uid1, 1), true)
	for _, host := range []string{
		"nqn.2014-08.org.nvmexpress:uuid:",                           // the UUID form without a UUID
		"nqn.2014-08.org." + strings.Repeat("a", 64) + ":x",          // a domain label over 63 bytes
		"nqn.2014-08.org.nvmexpress:uuid:5f3a6c1e-1111-4c2d-9e2f-00", // a short UUID
	} {
		if export.ValidateNQN(host) != nil || configfs.ValidateNQN(host) == nil {
			t.Fatalf("%q is not a host NQN only the api accepts", host)
		}
		_, err := h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tok(uid1, 2), VolumeId: id, HostNqn: host})
		wantCode(t, "AllowHost "+host, err, codes.InvalidArgument)
		rr, err := h.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: []*agentv1.DesiredExport{{
			FencingToken: tok(uid1, 3), VolumeId: id, Store: lvmStore,
			Transport:       &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: tcp(true)},
			AllowedHostNqns: []string{host},
		}}})
		if err != nil || len(rr.GetResults()) != 1 || rr.GetResults()[0].GetCode() != int32(codes.InvalidArgument) {
			t.Errorf("Reconcile with host %q = %v, %v; want one INVALID_ARGUMENT result", host, rr.GetResults(), err)
		}
		m, err := h.srv.marks.Get(ctxT(t), id)
		if err != nil || m == nil || m.Generation != 1 {
			t.Fatalf("after refusing host %q the mark is %+v, %v; want generation 1 still", host, m, err)
		}
	}
}
