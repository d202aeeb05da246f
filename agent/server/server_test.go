package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/configfs"
	"github.com/pillar-csi/pillar-csi/fencing"
	"github.com/pillar-csi/pillar-csi/fencing/grpcstatus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCreateExportDeleteLifecycle(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-1"
	cr, err := h.create(id, tok(uid1, 1), 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.GetVolume().GetCapacityBytes(); got != 1_003_520 {
		t.Errorf("capacity %d, want the backend's rounded 1003520", got)
	}
	er, err := h.export(id, tok(uid1, 2), false)
	if err != nil {
		t.Fatal(err)
	}
	ident, _ := export.For(id)
	e := er.GetExport()
	if e.GetSubsystemNqn() != ident.SubsystemNQN || e.GetNamespaceUuid() != ident.UUID ||
		e.GetNamespaceNguid() != ident.NGUID || e.GetNamespaceId() != 1 {
		t.Errorf("export identity %v, want %+v", e, ident)
	}
	if tc := e.GetNvmeofTcp(); tc.GetBindAddress() != "192.0.2.10" || tc.GetPort() != 4420 || tc.GetAclEnabled() {
		t.Errorf("transport %v", tc)
	}
	st, _ := h.nv.Read(context.Background())
	sub, ok := st.Subsystem(ident.SubsystemNQN)
	if !ok || !sub.Attrs.AllowAnyHost || sub.Attrs.Model != Model || len(sub.Attrs.Serial) != 20 {
		t.Fatalf("subsystem %+v", sub)
	}
	if ns := sub.Namespaces; len(ns) != 1 || ns[0].DevicePath != filepath.Join(h.devDir, id) || !ns[0].Enabled {
		t.Errorf("namespaces %+v", ns)
	}
	if s := h.srv.Stats(); s.Volumes != 1 || s.Exports != 1 {
		t.Errorf("stats %+v, want 1 volume, 1 export", s)
	}
	le, err := h.c.ListExports(ctxT(t), &agentv1.ListExportsRequest{})
	if err != nil || len(le.GetExports()) != 1 || le.GetExports()[0].GetNamespaceUuid() != ident.UUID {
		t.Errorf("ListExports = %v, %v", le, err)
	}

	if _, err := h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tok(uid1, 2), VolumeId: id, Store: lvmStore}); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.nv.Read(context.Background()); len(st.Subsystems) != 0 || len(st.Ports) != 0 {
		t.Errorf("after delete configfs has %+v", st)
	}
	if _, err := h.be.Get(context.Background(), id); !backends.IsNotFound(err) {
		t.Errorf("after delete the volume is still there: %v", err)
	}
	if s := h.srv.Stats(); s.Volumes != 0 || s.Exports != 0 {
		t.Errorf("stats %+v after delete", s)
	}
	// The retried delete of the same token is accepted (rule 14), and
	// the ended lifecycle can change nothing any more.
	if _, err := h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tok(uid1, 2), VolumeId: id, Store: lvmStore}); err != nil {
		t.Errorf("retried delete: %v", err)
	}
	_, err = h.create(id, tok(uid1, 3), 1<<20)
	wantRejection(t, "create after the lifecycle ended", err, agentv1.FencingRejection_REASON_LIFECYCLE_ENDED)
	// A new lifecycle (new UID) may create the volume again.
	if _, err := h.create(id, tok(uid2, 1), 1<<20); err != nil {
		t.Errorf("create of a new lifecycle: %v", err)
	}
}

// TestFencingRejectionChangesNothing sends every mutating RPC with a stale,
// a missing, a malformed and a foreign token, and checks that each is
// refused with its reason and that neither the store nor configfs moved.
func TestFencingRejectionChangesNothing(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-fenced"
	h.mustCreateExport(id, tok(uid1, 5), true)
	if _, err := h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tok(uid1, 5), VolumeId: id, HostNqn: "nqn.2014-08.org.example:node-a"}); err != nil {
		t.Fatal(err)
	}
	markFile := func() []byte {
		name, _ := fencing.FileName(id)
		b, err := os.ReadFile(filepath.Join(h.gen, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	beforeTree, beforeMutations, beforeMark := h.nv.snapshot(t), len(h.be.mutations()), markFile()
	calls := fencedCalls(t, h, id)
	for _, c := range []struct {
		name string
		tk   *agentv1.FencingToken
		want agentv1.FencingRejection_Reason
	}{
		{"stale", tok(uid1, 4), agentv1.FencingRejection_REASON_STALE_GENERATION},
		{"missing", nil, agentv1.FencingRejection_REASON_MISSING_TOKEN},
		{"malformed", tok("", 9), agentv1.FencingRejection_REASON_MALFORMED_TOKEN},
		{"replaced", tok(uid2, 9), agentv1.FencingRejection_REASON_LIFECYCLE_REPLACED},
	} {
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range calls {
				if !yield(k) {
					return
				}
			}
		}) {
			err := calls[name](c.tk)
			wantCode(t, c.name+" "+name, err, codes.FailedPrecondition)
			rej := wantRejection(t, c.name+" "+name, err, c.want)
			if rej != nil && rej.GetVolumeId() != id {
				t.Errorf("%s %s: rejection names volume %q", c.name, name, rej.GetVolumeId())
			}
			if rej != nil && c.name == "stale" && rej.GetPresented().GetPublicationGeneration() != 4 {
				t.Errorf("%s %s: rejection %v does not report the presented token 4", c.name, name, rej)
			}
			// The mark (uid1 at generation 5) is the operator's, never
			// the caller's: not in the rejection, not in the message.
			if rej.GetMark() != nil {
				t.Errorf("%s %s: rejection %v returns the volume's mark", c.name, name, rej)
			}
			if msg := status.Convert(err).Message(); (c.name == "replaced" && strings.Contains(msg, uid1)) || strings.Contains(msg, "generation 5") || strings.Contains(msg, "/") {
				t.Errorf("%s %s: the message %q names the mark or its file", c.name, name, msg)
			}
			if r, ok := grpcstatus.Reason(err); name != "Reconcile" && (!ok || r.String() == "ACCEPTED") {
				t.Errorf("%s %s: no fencing ErrorInfo in %v", c.name, name, err)
			}
		}
	}
	if after := h.nv.snapshot(t); after != beforeTree {
		t.Errorf("configfs changed by refused calls:\nbefore %s\nafter  %s", beforeTree, after)
	}
	if n := len(h.be.mutations()); n != beforeMutations {
		t.Errorf("the backend saw %d mutations from refused calls: %v", n-beforeMutations, h.be.mutations())
	}
	if !slices.Equal(markFile(), beforeMark) {
		t.Error("the mark file changed")
	}
}

// TestLostMarksFailClosed: with the marks directory wiped under a running
// agent, a volume that exists is refused for every mutating call and every
// token (UNMARKED), and nothing changes on the node; a new volume is
// still created; once an operator adopts the lost volume for its
// lifecycle, that lifecycle works again and any other is refused.
func TestLostMarksFailClosed(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-lost"
	h.mustCreateExport(id, tok(uid1, 5), true)
	if _, err := h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tok(uid1, 5), VolumeId: id, HostNqn: "nqn.2014-08.org.example:node-a"}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(h.gen)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(h.gen, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	beforeTree, beforeMutations := h.nv.snapshot(t), len(h.be.mutations())
	calls := fencedCalls(t, h, id)
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		for _, tk := range []*agentv1.FencingToken{tok(uid1, 5), tok(uid2, 1)} {
			err := calls[name](tk)
			what := fmt.Sprintf("%s %s/%d", name, tk.GetLifecycleUid()[len(tk.GetLifecycleUid())-1:], tk.GetPublicationGeneration())
			wantCode(t, what, err, codes.FailedPrecondition)
			wantRejection(t, what, err, agentv1.FencingRejection_REASON_UNMARKED)
		}
	}
	if after := h.nv.snapshot(t); after != beforeTree {
		t.Errorf("configfs changed by refused calls:\nbefore %s\nafter  %s", beforeTree, after)
	}
	if n := len(h.be.mutations()); n != beforeMutations {
		t.Errorf("the backend saw %d mutations from refused calls: %v", n-beforeMutations, h.be.mutations())
	}
	if m, _ := h.srv.marks.Get(ctxT(t), id); m != nil {
		t.Errorf("a refused call wrote mark %v", m)
	}
	if _, err := h.create("pvc-new", tok(uid2, 1), 1<<20); err != nil {
		t.Errorf("a new volume beside the lost one: %v", err)
	}

	if _, err := h.srv.marks.Adopt(ctxT(t), id, fencing.AdoptOptions{Token: fencing.Token{UID: uid1, Generation: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tok(uid2, 9), VolumeId: id, Store: lvmStore}); err == nil {
		t.Error("another lifecycle deleted the adopted volume")
	}
	if _, err := h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tok(uid1, 6), VolumeId: id, Store: lvmStore}); err != nil {
		t.Errorf("the adopted lifecycle's DeleteVolume: %v", err)
	}
}

// fencedCalls are the agent's mutating calls on volume id (created and
// exported with AllowHost of node-a, as TestFencingRejectionChangesNothing
// sets it up), each sent with the token given, by name.
func fencedCalls(t *testing.T, h *harness, id string) map[string]func(tk *agentv1.FencingToken) error {
	host := "nqn.2014-08.org.example:node-b"
	return map[string]func(tk *agentv1.FencingToken) error{
		"CreateVolume": func(tk *agentv1.FencingToken) error {
			_, err := h.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore, CapacityBytes: 8 << 20})
			return err
		},
		"ExpandVolume": func(tk *agentv1.FencingToken) error {
			_, err := h.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore, CapacityBytes: 8 << 20})
			return err
		},
		"ExportVolume": func(tk *agentv1.FencingToken) error {
			_, err := h.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore,
				Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: "198.51.100.1", Port: 4421}}})
			return err
		},
		"UnexportVolume": func(tk *agentv1.FencingToken) error {
			_, err := h.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tk, VolumeId: id})
			return err
		},
		"AllowHost": func(tk *agentv1.FencingToken) error {
			_, err := h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tk, VolumeId: id, HostNqn: host})
			return err
		},
		"DenyHost": func(tk *agentv1.FencingToken) error {
			_, err := h.c.DenyHost(ctxT(t), &agentv1.DenyHostRequest{FencingToken: tk, VolumeId: id, HostNqn: "nqn.2014-08.org.example:node-a"})
			return err
		},
		"DeleteVolume": func(tk *agentv1.FencingToken) error {
			_, err := h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore})
			return err
		},
		"Reconcile": func(tk *agentv1.FencingToken) error {
			r, err := h.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: []*agentv1.DesiredExport{{FencingToken: tk, VolumeId: id,
				Store: lvmStore, Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: tcp(false)}}}})
			if err != nil {
				return err
			}
			res := r.GetResults()[0]
			if codes.Code(res.GetCode()) != codes.FailedPrecondition || res.GetFencingRejection() == nil {
				t.Errorf("Reconcile entry: %v", res)
				return nil
			}
			return agentv1.NewFencingError(res.GetFencingRejection(), res.GetMessage())
		},
	}
}

func TestIdempotency(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-idem"
	tk := tok(uid1, 1)
	a, err := h.create(id, tk, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.create(id, tk, 1<<20)
	if err != nil || b.GetVolume().GetCapacityBytes() != a.GetVolume().GetCapacityBytes() {
		t.Errorf("retried create = %v, %v", b, err)
	}
	if c, err := h.create(id, tk, 1<<19); err != nil || c.GetVolume().GetCapacityBytes() != 1<<20 {
		t.Errorf("create smaller than existing = %v, %v; want the existing volume as is", c, err)
	}
	_, err = h.create(id, tk, 2<<20)
	wantCode(t, "create larger than existing", err, codes.AlreadyExists)

	h.mustCreateExport(id, tk, false)
	writes := h.nv.writes
	h.mustCreateExport(id, tk, false)
	if h.nv.writes != writes {
		t.Errorf("an identical export wrote configfs again (%d writes)", h.nv.writes-writes)
	}
	// A corrected spec converges: another address, then ACL on.
	if _, err := h.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore,
		Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: "2001:db8::1", Port: 4421, AclEnabled: true}}}); err != nil {
		t.Fatal(err)
	}
	st, _ := h.nv.Read(context.Background())
	if len(st.Ports) != 1 || st.Ports[0].Address.TrAddr != "2001:db8::1" || st.Ports[0].Address.AdrFam != "ipv6" || st.Subsystems[0].Attrs.AllowAnyHost {
		t.Errorf("re-export did not converge: %+v", st)
	}
	reads := h.nv.reads
	for range 2 {
		if _, err := h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tk, VolumeId: id, HostNqn: "nqn.2014-08.org.example:w1"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.nv.reads - reads; n != 0 {
		t.Errorf("AllowHost read the whole of configfs %d times; it needs only its own export", n)
	}
	sub, _, _ := h.nv.ReadSubsystem(context.Background(), export.SubsystemNQNPrefix+id)
	if !slices.Equal(sub.AllowedHosts, []string{"nqn.2014-08.org.example:w1"}) {
		t.Errorf("allowed hosts %v", sub.AllowedHosts)
	}
	// ExportVolume keeps the access list AllowHost made.
	h.export(id, tk, true)
	sub, _, _ = h.nv.ReadSubsystem(context.Background(), export.SubsystemNQNPrefix+id)
	if len(sub.AllowedHosts) != 1 {
		t.Errorf("re-export dropped the access list: %v", sub.AllowedHosts)
	}
	for range 2 {
		if _, err := h.c.DenyHost(ctxT(t), &agentv1.DenyHostRequest{FencingToken: tk, VolumeId: id, HostNqn: "nqn.2014-08.org.example:w1"}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := h.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tk, VolumeId: id}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tk, VolumeId: id, HostNqn: "nqn.2014-08.org.example:w1"})
	wantCode(t, "AllowHost on an unexported volume", err, codes.NotFound)
	if _, err := h.c.DenyHost(ctxT(t), &agentv1.DenyHostRequest{FencingToken: tk, VolumeId: id, HostNqn: "nqn.2014-08.org.example:w1"}); err != nil {
		t.Errorf("DenyHost on an unexported volume: %v", err)
	}

	// Expand: larger grows and revalidates only when exported; smaller
	// or equal is reported as is.
	h.export(id, tk, false)
	r, err := h.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore, CapacityBytes: 3 << 20})
	if err != nil || r.GetVolume().GetCapacityBytes() != 3<<20 {
		t.Fatalf("expand = %v, %v", r, err)
	}
	r, err = h.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tk, VolumeId: id, Store: lvmStore, CapacityBytes: 1 << 20})
	if err != nil || r.GetVolume().GetCapacityBytes() != 3<<20 {
		t.Errorf("expand to less = %v, %v; want the volume as is", r, err)
	}
	if len(h.nv.revalidated) != 2 {
		t.Errorf("revalidated %v, want twice", h.nv.revalidated)
	}
	if got := strings.Join(h.be.mutations(), ","); strings.Count(got, "expand") != 1 {
		t.Errorf("backend mutations %s: want one expand", got)
	}
	_, err = h.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tok(uid2, 1), VolumeId: "pvc-none", Store: lvmStore, CapacityBytes: 1 << 20})
	wantCode(t, "expand of a missing volume", err, codes.NotFound)
	_, err = h.export("pvc-none", tok(uid2, 1), false)
	wantCode(t, "export of a missing volume", err, codes.NotFound)
}

func TestExportRollback(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-roll"
	if _, err := h.create(id, tok(uid1, 1), 1<<20); err != nil {
		t.Fatal(err)
	}
	h.nv.failApply = func(configfs.Export) error {
		return &configfs.Error{Op: "symlink", Path: "/sys/kernel/config/nvmet/ports/1/subsystems/x", Err: errors.New("address already in use")}
	}
	_, err := h.export(id, tok(uid1, 1), false)
	wantCode(t, "failed export", err, codes.Internal)
	if !strings.Contains(err.Error(), "symlink") {
		t.Errorf("the error does not name the failed write: %v", err)
	}
	if st, _ := h.nv.Read(context.Background()); len(st.Subsystems) != 0 {
		t.Errorf("a failed new export left %+v", st.Subsystems)
	}
	if h.srv.Stats().Exports != 0 {
		t.Errorf("stats count a rolled-back export")
	}
	h.nv.failApply = nil
	if _, err := h.export(id, tok(uid1, 1), false); err != nil {
		t.Fatalf("retry: %v", err)
	}
	// A failed change of an existing export is left for the retry.
	h.nv.failApply = func(configfs.Export) error { return &configfs.Error{Op: "write", Path: "x", Err: errors.New("boom")} }
	h.export(id, tok(uid1, 1), true)
	if st, _ := h.nv.Read(context.Background()); len(st.Subsystems) != 1 {
		t.Errorf("a failed change removed an existing export")
	}
	h.nv.failApply = nil
	if r, err := h.export(id, tok(uid1, 1), true); err != nil || !r.GetExport().GetNvmeofTcp().GetAclEnabled() {
		t.Errorf("retry after a failed change = %v, %v", r, err)
	}
}

// TestExpandHalfMadeExport: a killed agent can leave an export whose
// namespace is not enabled yet; nvmet refuses revalidate_size there
// (EINVAL), so ExpandVolume must grow the volume without it, and the
// retried export enables the namespace at the new size.
func TestExpandHalfMadeExport(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-half"
	h.mustCreateExport(id, tok(uid1, 1), false)
	ident, _ := export.For(id)
	h.nv.mu.Lock()
	e := h.nv.exports[ident.SubsystemNQN]
	e.Namespaces[0].Enabled = false
	h.nv.exports[ident.SubsystemNQN] = e
	h.nv.mu.Unlock()

	r, err := h.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: id, Store: lvmStore, CapacityBytes: 2 << 20})
	if err != nil || r.GetVolume().GetCapacityBytes() != 2<<20 {
		t.Fatalf("expand with a disabled namespace = %v, %v; want the volume grown", r, err)
	}
	if len(h.nv.revalidated) != 0 {
		t.Errorf("revalidated a disabled namespace: %v", h.nv.revalidated)
	}
	if _, err := h.export(id, tok(uid1, 1), false); err != nil {
		t.Fatalf("retried export: %v", err)
	}
	if _, err := h.c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: id, Store: lvmStore, CapacityBytes: 3 << 20}); err != nil {
		t.Fatalf("expand once the namespace is enabled: %v", err)
	}
	if want := []string{ident.SubsystemNQN + "/1"}; !slices.Equal(h.nv.revalidated, want) {
		t.Errorf("revalidated %v, want %v", h.nv.revalidated, want)
	}
}

// TestFailureLogs: a failed change is logged at error level with the
// volume's ID and the cause under "error", the key the rest of
// pillar-agent's logs (the RPC records of package app) use.
func TestFailureLogs(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-logs"
	h.be.failNext = errors.New("lvcreate: boom")
	if _, err := h.create(id, tok(uid1, 1), 1<<20); err == nil {
		t.Fatal("create with a failing backend succeeded")
	}
	h.mustCreateExport("pvc-other", tok(uid1, 1), false)
	if _, err := h.create(id, tok(uid1, 1), 1<<20); err != nil {
		t.Fatal(err)
	}
	h.nv.failApply = func(configfs.Export) error { return &configfs.Error{Op: "write", Path: "x", Err: errors.New("boom")} }
	if _, err := h.export(id, tok(uid1, 1), false); err == nil {
		t.Fatal("export with a failing configfs succeeded")
	}
	var failures []string
	for _, r := range h.logs.records(t) {
		if r["level"] != "ERROR" {
			continue
		}
		failures = append(failures, fmt.Sprint(r["msg"]))
		if r["volume_id"] != id || r["error"] == nil || r["err"] != nil {
			t.Errorf("error record without volume_id %q or with the cause not under \"error\": %v", id, r)
		}
	}
	if len(failures) < 2 {
		t.Errorf("error records %q; want the failed create and the failed export", failures)
	}
}

func TestStoreErrors(t *testing.T) {
	h := newHarness(t)
	h.be.missing = true
	_, err := h.create("pvc-x", tok(uid1, 1), 1<<20)
	wantCode(t, "create in a missing store", err, codes.FailedPrecondition)
	if _, ok := agentv1.FencingRejectionOf(err); ok {
		t.Errorf("a missing store reported as fencing: %v", err)
	}
	_, err = h.c.GetCapacity(ctxT(t), &agentv1.GetCapacityRequest{Store: lvmStore})
	wantCode(t, "capacity of a missing store", err, codes.FailedPrecondition)
	h.be.missing = false
	h.be.failNext = backends.ErrNoSpace
	_, err = h.create("pvc-x", tok(uid1, 1), 1<<20)
	wantCode(t, "create without space", err, codes.ResourceExhausted)

	c, err := h.c.GetCapacity(ctxT(t), &agentv1.GetCapacityRequest{Store: lvmStore})
	if err != nil || c.GetTotalBytes() != 10<<30 {
		t.Errorf("GetCapacity = %v, %v", c, err)
	}
	h.create("pvc-b", tok(uid1, 1), 1<<20)
	h.create("pvc-a", tok(uid2, 1), 1<<20)
	l, err := h.c.ListVolumes(ctxT(t), &agentv1.ListVolumesRequest{Store: lvmStore})
	if err != nil || len(l.GetVolumes()) != 2 || l.GetVolumes()[0].GetVolumeId() != "pvc-a" {
		t.Errorf("ListVolumes = %v, %v", l, err)
	}
}

func TestInvalidArguments(t *testing.T) {
	h := newHarness(t)
	zfsBad := &agentv1.Store{Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: "tank", Properties: map[string]string{"volsize": "1G"}}}}
	for name, call := range map[string]func() error{
		"bad volume ID": func() error { _, err := h.create("PVC_1", tok(uid1, 1), 1); return err },
		"zero size":     func() error { _, err := h.create("pvc-1", tok(uid1, 1), 0); return err },
		"no store": func() error {
			_, err := h.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", CapacityBytes: 1})
			return err
		},
		"store without backend": func() error {
			_, err := h.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", CapacityBytes: 1, Store: &agentv1.Store{Name: "x"}})
			return err
		},
		"bad address": func() error {
			_, err := h.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", Store: lvmStore,
				Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: "node-1", Port: 4420}}})
			return err
		},
		"bad port": func() error {
			_, err := h.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", Store: lvmStore,
				Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: "10.0.0.1", Port: 70000}}})
			return err
		},
		"no transport": func() error {
			_, err := h.c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", Store: lvmStore})
			return err
		},
		"foreign NQN": func() error {
			_, err := h.c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", SubsystemNqn: "nqn.2014-08.org.example:other"})
			return err
		},
		"bad host NQN": func() error {
			_, err := h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", HostNqn: "node-1"})
			return err
		},
		"reconcile duplicate": func() error {
			d := &agentv1.DesiredExport{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", Store: lvmStore}
			_, err := h.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: []*agentv1.DesiredExport{d, d}})
			return err
		},
	} {
		wantCode(t, name, call(), codes.InvalidArgument)
	}
	// The real factory validates store configurations.
	srv := &Server{stores: newStoreCache(realBackends(command.Exec{}, nil), 1)}
	if _, _, err := srv.backend("CreateVolume", zfsBad); err == nil || !strings.Contains(err.Error(), "volsize") {
		t.Errorf("a zfs store setting volsize = %v, want INVALID_ARGUMENT naming it", err)
	}
	if len(h.be.calls) != 0 {
		t.Errorf("invalid requests reached the backend: %v", h.be.calls)
	}
	if _, err := os.Stat(h.gen); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(h.gen)
	if ents = slices.DeleteFunc(ents, func(e os.DirEntry) bool { return e.Name() == fencing.IdentityFileName }); len(ents) != 0 {
		t.Errorf("invalid requests wrote marks: %v", ents)
	}
}

// TestBusyVolumeWaits: a second call for a volume waits for the first,
// while its caller waits; a caller that stops waiting first gets its
// deadline, naming the call it waited for; calls for other volumes are not
// held up.
func TestBusyVolumeWaits(t *testing.T) {
	h := newHarness(t)
	unblock, done := h.blockedCreate("pvc-slow")
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := h.c.ExportVolume(short, &agentv1.ExportVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-slow", Store: lvmStore,
		Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: tcp(false)}})
	wantCode(t, "export while create runs, its caller waiting 200ms", err, codes.DeadlineExceeded)
	// Other calls are not held up.
	if _, err := h.c.GetCapacity(ctxT(t), &agentv1.GetCapacityRequest{Store: lvmStore}); err != nil {
		t.Error(err)
	}
	exported := make(chan error, 1)
	go func() { _, err := h.export("pvc-slow", tok(uid1, 1), false); exported <- err }()
	select {
	case err := <-exported:
		t.Fatalf("export while create runs returned %v before the create finished", err)
	case <-time.After(100 * time.Millisecond):
	}
	unblock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-exported; err != nil {
		t.Errorf("the export that waited for the create: %v", err)
	}
}

// TestCallerGoneCreateFinishes: a caller that gives up (the CSI
// provisioner's timeout) must not cancel the backend's commands half-way;
// the create finishes, and the retry finds the volume.
func TestCallerGoneCreateFinishes(t *testing.T) {
	h := newHarness(t)
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	h.be.blockCh, h.be.enteredCh = block, entered
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.c.CreateVolume(ctx, &agentv1.CreateVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-gone", Store: lvmStore, CapacityBytes: 1 << 20})
		done <- err
	}()
	<-entered
	cancel()
	wantCode(t, "the cancelled call", <-done, codes.Canceled)
	// The server sees the cancellation asynchronously; give it the time
	// to (wrongly) pass it on before the backend goes on.
	time.Sleep(100 * time.Millisecond)
	close(block)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := h.create("pvc-gone", tok(uid1, 1), 1<<20)
		if err == nil {
			break
		}
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			t.Fatalf("retry after the caller went away: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.be.mu.Lock()
	defer h.be.mu.Unlock()
	if len(h.be.createCtxErrs) == 0 || h.be.createCtxErrs[0] != nil {
		t.Errorf("the backend's create ran with a done context after its caller went away: %v", h.be.createCtxErrs)
	}
}

// TestQueuedCallFollowsItsCaller: an admitted call still waiting for a
// slot of its store has started nothing, so it ends with its caller and
// never runs later; its retry queues again in its turn.
func TestQueuedCallFollowsItsCaller(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.StoreConcurrency = 1 })
	unblock, done := h.blockedCreate("pvc-holder")
	for gen := range uint64(2) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := h.c.CreateVolume(ctx, &agentv1.CreateVolumeRequest{FencingToken: tok(uid2, gen+1), VolumeId: "pvc-queued", Store: lvmStore, CapacityBytes: 1 << 20})
		cancel()
		wantCode(t, fmt.Sprintf("attempt %d, queued behind the holder", gen+1), err, codes.DeadlineExceeded)
	}
	// Let the server see the last deadline before the slot frees.
	time.Sleep(100 * time.Millisecond)
	unblock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := h.create("pvc-queued", tok(uid2, 3), 1<<20); err != nil {
		t.Fatalf("the retry once the store is free: %v", err)
	}
	h.be.mu.Lock()
	defer h.be.mu.Unlock()
	if n := countOf(h.be.calls, "create pvc-queued"); n != 1 {
		t.Errorf("the backend saw %d creates of the queued volume, want 1 (the abandoned calls ran nothing): %v", n, h.be.calls)
	}
}

func countOf(calls []string, call string) int {
	n := 0
	for _, c := range calls {
		if c == call {
			n++
		}
	}
	return n
}

func TestOneBackendPerStoreConfig(t *testing.T) {
	h := newHarness(t)
	h.create("pvc-1", tok(uid1, 1), 1<<20)
	renamed := &agentv1.Store{Name: "other-name", Backend: lvmStore.Backend}
	h.c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-2", Store: renamed, CapacityBytes: 1 << 20})
	if h.built != 1 {
		t.Errorf("built %d backends for one store configuration", h.built)
	}
	thin := &agentv1.Store{Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{VolumeGroup: "vg0", ThinPool: "tp"}}}
	h.c.GetCapacity(ctxT(t), &agentv1.GetCapacityRequest{Store: thin})
	if h.built != 2 {
		t.Errorf("built %d backends for two store configurations", h.built)
	}
}

// TestReconcile checks the ownership rule: desired exports are created or
// repaired, a foreign subsystem is never touched, an unlisted live export
// is retained, and unlisted exports whose lifecycle ended or whose device
// vanished are removed.
func TestReconcile(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	foreign := configfs.Export{NQN: "nqn.2014-08.org.example:not-ours", Attrs: configfs.SubsystemAttrs{AllowAnyHost: true},
		Namespaces: []configfs.Namespace{{NSID: 1, DevicePath: "/nonexistent/dev"}}}
	if err := h.nv.Apply(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	h.mustCreateExport("pvc-live", tok(uid1, 1), false)
	h.mustCreateExport("pvc-ended", tok(uid1, 1), false)
	h.mustCreateExport("pvc-gone", tok(uid1, 1), false)
	h.mustCreateExport("pvc-want", tok(uid1, 1), true)
	h.mustCreateExport("pvc-stale", tok(uid1, 7), false)
	// pvc-ended: its lifecycle ends, and a leftover of its export is
	// written back behind the agent's back.
	st, _ := h.nv.Read(ctx)
	leftover, _ := st.Export(export.SubsystemNQNPrefix + "pvc-ended")
	if _, err := h.c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tok(uid1, 2), VolumeId: "pvc-ended", Store: lvmStore}); err != nil {
		t.Fatal(err)
	}
	h.nv.Apply(ctx, leftover)
	// pvc-gone: the device vanished.
	os.Remove(filepath.Join(h.devDir, "pvc-gone"))
	// pvc-want: configfs wiped (reboot); it must come back with hosts.
	h.nv.Remove(ctx, export.SubsystemNQNPrefix+"pvc-want")
	wantSize := len(h.be.mutations())

	want := []*agentv1.DesiredExport{
		{FencingToken: tok(uid1, 2), VolumeId: "pvc-want", Store: lvmStore, Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: tcp(true)},
			AllowedHostNqns: []string{"nqn.2014-08.org.example:b", "nqn.2014-08.org.example:a", "nqn.2014-08.org.example:a"}},
		{FencingToken: tok(uid1, 3), VolumeId: "pvc-stale", Store: lvmStore, Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: tcp(false)}},
		{FencingToken: tok(uid1, 1), VolumeId: "pvc-missing", Store: lvmStore, Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: tcp(false)}},
		{FencingToken: tok(uid1, 1), VolumeId: "Bad_ID", Store: lvmStore},
	}
	// A batch with more to follow converges its entries and sweeps
	// nothing: the dead exports stay until the last batch.
	reads := h.nv.reads
	r, err := h.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: want[:1], Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetResults()) != 1 || r.GetResults()[0].GetCode() != int32(codes.OK) || len(r.GetRemovedSubsystemNqns())+len(r.GetRetainedSubsystemNqns()) != 0 {
		t.Errorf("partial batch: %v, want pvc-want converged and no sweep", r)
	}
	if h.nv.reads != reads {
		t.Errorf("a partial batch read the whole of configfs")
	}
	st, _ = h.nv.Read(ctx)
	if _, ok := st.Export(export.SubsystemNQNPrefix + "pvc-gone"); !ok {
		t.Error("a partial batch removed an unlisted export")
	}
	reads = h.nv.reads
	r, err = h.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: want})
	if err != nil {
		t.Fatal(err)
	}
	if n := h.nv.reads - reads; n != 1 {
		t.Errorf("reconcile read the whole of configfs %d times, want once", n)
	}
	codesGot := []codes.Code{}
	for i, res := range r.GetResults() {
		if res.GetVolumeId() != want[i].GetVolumeId() {
			t.Errorf("result %d is for %q, want request order", i, res.GetVolumeId())
		}
		codesGot = append(codesGot, codes.Code(res.GetCode()))
	}
	if wantCodes := []codes.Code{codes.OK, codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument}; !slices.Equal(codesGot, wantCodes) {
		t.Errorf("codes %v, want %v (%v)", codesGot, wantCodes, r.GetResults())
	}
	if rej := r.GetResults()[1].GetFencingRejection(); rej.GetReason() != agentv1.FencingRejection_REASON_STALE_GENERATION {
		t.Errorf("stale entry rejection %v", rej)
	}
	if got := r.GetResults()[0].GetExport().GetAllowedHostNqns(); !slices.Equal(got, []string{"nqn.2014-08.org.example:a", "nqn.2014-08.org.example:b"}) {
		t.Errorf("reconciled hosts %v", got)
	}
	if !slices.Equal(r.GetRemovedSubsystemNqns(), []string{export.SubsystemNQNPrefix + "pvc-ended", export.SubsystemNQNPrefix + "pvc-gone"}) {
		t.Errorf("removed %v", r.GetRemovedSubsystemNqns())
	}
	if !slices.Equal(r.GetRetainedSubsystemNqns(), []string{export.SubsystemNQNPrefix + "pvc-live"}) {
		t.Errorf("retained %v", r.GetRetainedSubsystemNqns())
	}
	st, _ = h.nv.Read(ctx)
	var nqns []string
	for _, s := range st.Subsystems {
		nqns = append(nqns, s.NQN)
	}
	wantNQNs := []string{"nqn.2014-08.org.example:not-ours", export.SubsystemNQNPrefix + "pvc-live",
		export.SubsystemNQNPrefix + "pvc-stale", export.SubsystemNQNPrefix + "pvc-want"}
	if !slices.Equal(nqns, wantNQNs) {
		t.Errorf("subsystems after reconcile %v, want %v", nqns, wantNQNs)
	}
	if got, _ := st.Export(foreign.NQN); !equalExport(got, mustNormalize(t, foreign)) {
		t.Errorf("the foreign subsystem changed: %+v", got)
	}
	if n := len(h.be.mutations()); n != wantSize {
		t.Errorf("reconcile changed the backend: %v", h.be.mutations()[wantSize:])
	}
	if s := h.srv.Stats(); s.Exports != 3 {
		t.Errorf("stats count %d exports, want the 3 pillar-owned", s.Exports)
	}
	// Idempotent: the same request again writes nothing.
	writes := h.nv.writes
	if _, err := h.c.Reconcile(ctxT(t), &agentv1.ReconcileRequest{Exports: want}); err != nil {
		t.Fatal(err)
	}
	if h.nv.writes != writes {
		t.Errorf("a repeated reconcile wrote configfs %d times", h.nv.writes-writes)
	}
}

func mustNormalize(t *testing.T, e configfs.Export) configfs.Export {
	n, err := e.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNewReadyClose(t *testing.T) {
	root := t.TempDir()
	gen := filepath.Join(t.TempDir(), "gen")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(Config{GenerationsDir: gen, ConfigfsRoot: root, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "nvmet") {
		t.Errorf("Ready without nvmet = %v", err)
	}
	os.MkdirAll(filepath.Join(root, "nvmet", "subsystems"), 0o755)
	if err := s.Ready(context.Background()); err != nil {
		t.Errorf("Ready = %v", err)
	}
	// A second agent on the same marks cannot start.
	_, err = New(Config{GenerationsDir: gen, ConfigfsRoot: root, Logger: quiet, OpenTimeout: 50 * time.Millisecond})
	if !errors.Is(err, fencing.ErrLocked) {
		t.Errorf("second New = %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := New(Config{GenerationsDir: gen, ConfigfsRoot: root, Logger: quiet})
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	s2.Close()
	// After Close, calls are UNAVAILABLE.
	_, err = s.CreateVolume(context.Background(), &agentv1.CreateVolumeRequest{FencingToken: tok(uid1, 1), VolumeId: "pvc-1", Store: lvmStore, CapacityBytes: 1})
	wantCode(t, "create after Close", err, codes.Unavailable)

	if _, err := New(Config{GenerationsDir: "/proc/pillar-cannot-exist", Logger: quiet}); err == nil {
		t.Error("New with an unusable directory succeeded")
	}
}

func TestGetAgentInfo(t *testing.T) {
	sys, root := t.TempDir(), t.TempDir()
	for _, d := range []string{"module/nvmet_tcp", "module/dm_mod", "module/dm_thin_pool"} {
		os.MkdirAll(filepath.Join(sys, d), 0o755)
	}
	os.MkdirAll(filepath.Join(root, "nvmet"), 0o755)
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "lvm"), []byte("#!/bin/sh\n"), 0o755)
	t.Setenv("PATH", bin)
	proc := t.TempDir()
	const bootID = "5b2f1c0e-4a5d-4f7e-9a51-0c3c1f1d2e3f"
	os.MkdirAll(filepath.Join(proc, "sys/kernel/random"), 0o755)
	os.WriteFile(filepath.Join(proc, "sys/kernel/random/boot_id"), []byte(bootID+"\n"), 0o444)
	start := func() *agentv1.GetAgentInfoResponse {
		s, err := New(Config{NodeName: "storage-1", Version: "v1.2.3", GenerationsDir: t.TempDir(), ConfigfsRoot: root, SysfsRoot: sys,
			ProcRoot: proc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r, err := s.GetAgentInfo(context.Background(), &agentv1.GetAgentInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.GetAgentInfo(context.Background(), &agentv1.GetAgentInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if again.GetInstanceId() != r.GetInstanceId() {
			t.Errorf("instance ID changed within one process: %q, then %q", r.GetInstanceId(), again.GetInstanceId())
		}
		return r
	}
	r := start()
	want := []agentv1.Capability{agentv1.Capability_CAPABILITY_BACKEND_LVM, agentv1.Capability_CAPABILITY_BACKEND_LVM_THIN,
		agentv1.Capability_CAPABILITY_TRANSPORT_NVMEOF_TCP, agentv1.Capability_CAPABILITY_SNAPSHOTS}
	if r.GetNodeName() != "storage-1" || r.GetAgentVersion() != "v1.2.3" || !slices.Equal(r.GetCapabilities(), want) {
		t.Errorf("GetAgentInfo = %v, want capabilities %v", r, want)
	}
	if r.GetBootId() != bootID {
		t.Errorf("boot ID = %q, want %q", r.GetBootId(), bootID)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(r.GetInstanceId()) {
		t.Errorf("instance ID %q is not a random UUID", r.GetInstanceId())
	}
	// A restarted agent (a new Server on the same node) reports a new
	// instance and the same boot.
	if r2 := start(); r2.GetInstanceId() == r.GetInstanceId() || r2.GetBootId() != bootID {
		t.Errorf("after a restart: instance %q (was %q), boot %q; want a new instance, the same boot",
			r2.GetInstanceId(), r.GetInstanceId(), r2.GetBootId())
	}
}

// AllowHost on an export linked to no port (an ExportVolume that failed
// half-way, or an agent that died in the middle of a narrowing) reports
// UNAVAILABLE instead of a publication no host could use; DenyHost there
// succeeds, as no host can be connected.
func TestAllowHostOnAnExportWithoutPort(t *testing.T) {
	h := newHarness(t)
	const id = "pvc-portless"
	tk := tok(uid1, 1)
	h.mustCreateExport(id, tk, true)
	nqn := export.SubsystemNQNPrefix + id
	h.nv.mu.Lock()
	e := h.nv.exports[nqn]
	e.Ports = nil
	h.nv.exports[nqn] = e
	h.nv.mu.Unlock()
	_, err := h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tk, VolumeId: id, HostNqn: "nqn.2014-08.org.example:w1"})
	wantCode(t, "AllowHost on an export linked to no port", err, codes.Unavailable)
	if _, err := h.c.DenyHost(ctxT(t), &agentv1.DenyHostRequest{FencingToken: tk, VolumeId: id, HostNqn: "nqn.2014-08.org.example:w1"}); err != nil {
		t.Errorf("DenyHost on an export linked to no port: %v", err)
	}
	h.mustCreateExport(id, tk, true)
	if _, err := h.c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tk, VolumeId: id, HostNqn: "nqn.2014-08.org.example:w1"}); err != nil {
		t.Errorf("AllowHost once exported again: %v", err)
	}
}
