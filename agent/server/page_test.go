package server

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// exportsOf is n exports pvc-00000, pvc-00001, ..., each allowed to hosts
// host NQNs.
func exportsOf(n, hosts int) []*agentv1.Export {
	out := make([]*agentv1.Export, n)
	for i := range out {
		e := &agentv1.Export{VolumeId: fmt.Sprintf("pvc-%05d", i)}
		for h := range hosts {
			e.AllowedHostNqns = append(e.AllowedHostNqns, fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:%08d-0000-4000-8000-%012d", i, h))
		}
		out[i] = e
	}
	return out
}

// allPages reads every page of items with page size size.
func allPages(t *testing.T, items []*agentv1.Export, size int32) (ids []string, pages int) {
	t.Helper()
	token := ""
	for {
		got, next, err := page("ListExports", items, (*agentv1.Export).GetVolumeId, size, token)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		var bytes int
		for _, e := range got {
			ids = append(ids, e.GetVolumeId())
			bytes += proto.Size(e)
		}
		if resp := proto.Size(&agentv1.ListExportsResponse{Exports: got, NextPageToken: next}); resp > agentv1.MaxMessageSize {
			t.Fatalf("page %d is %d bytes, over MaxMessageSize", pages, resp)
		}
		if next == "" {
			return ids, pages
		}
		if len(got) == 0 {
			t.Fatal("an empty page with a next token")
		}
		token = next
	}
}

func TestPage(t *testing.T) {
	for _, tc := range []struct {
		name        string
		n, hosts    int
		size        int32
		wantPages   int
		wantMaxPage int
	}{
		{name: "empty", n: 0, wantPages: 1},
		{name: "one page", n: 3, size: 10, wantPages: 1},
		{name: "exact pages", n: 6, size: 3, wantPages: 2},
		{name: "a last short page", n: 7, size: 3, wantPages: 3},
		{name: "10,000 exports at the default size", n: 10_000, wantPages: 10},
		// 1,000 exports allowed to 64 hosts each are about 4.5 MiB, over
		// the message limit: the pages end on bytes, not on the count.
		{name: "large exports", n: 1000, hosts: 64, wantPages: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items := exportsOf(tc.n, tc.hosts)
			ids, pages := allPages(t, items, tc.size)
			if len(ids) != tc.n {
				t.Fatalf("listed %d of %d", len(ids), tc.n)
			}
			for i, id := range ids {
				if id != items[i].GetVolumeId() {
					t.Fatalf("entry %d is %s, want %s (each once, in order)", i, id, items[i].GetVolumeId())
				}
			}
			if pages != tc.wantPages {
				t.Errorf("%d pages, want %d", pages, tc.wantPages)
			}
		})
	}
}

func TestPageContinuesAfterChanges(t *testing.T) {
	items := exportsOf(10, 0)
	first, next, err := page("ListExports", items, (*agentv1.Export).GetVolumeId, 4, "")
	if err != nil || len(first) != 4 || next != "pvc-00003" {
		t.Fatalf("first page %v, next %q, %v", first, next, err)
	}
	// pvc-00003 (the token) and pvc-00004 are deleted, pvc-00001a is
	// created before the token: the next page starts after the token.
	changed := append(append(append([]*agentv1.Export{}, items[:2]...), &agentv1.Export{VolumeId: "pvc-00001a"}), items[2:3]...)
	changed = append(changed, items[5:]...)
	got, _, err := page("ListExports", changed, (*agentv1.Export).GetVolumeId, 4, next)
	if err != nil || len(got) != 4 || got[0].GetVolumeId() != "pvc-00005" {
		t.Errorf("the page after deletions starts at %v, %v; want pvc-00005", got, err)
	}
}

func TestPageRefusesBadRequests(t *testing.T) {
	items := exportsOf(3, 0)
	for _, tc := range []struct {
		size  int32
		token string
		want  string
	}{
		{size: -1, want: "page_size -1"},
		{size: agentv1.MaxListPageSize + 1, want: "page_size 1001"},
		{token: "not/a volume", want: "page_token"},
	} {
		_, _, err := page("ListExports", items, (*agentv1.Export).GetVolumeId, tc.size, tc.token)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("page(size %d, token %q) = %v, want INVALID_ARGUMENT naming %s", tc.size, tc.token, err, tc.want)
		}
	}
}

// TestListPages lists exports and volumes through the server, two at a
// time.
func TestListPages(t *testing.T) {
	h := newHarness(t)
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("pvc-%d", i)
		h.mustCreateExport(id, tok(uid1, 2), false)
		want = append(want, id)
	}
	var exports, volumes []string
	for token, pages := "", 0; ; pages++ {
		le, err := h.c.ListExports(ctxT(t), &agentv1.ListExportsRequest{PageSize: 2, PageToken: token})
		if err != nil || pages > 5 {
			t.Fatalf("ListExports page %d: %v, %v", pages, le, err)
		}
		for _, e := range le.GetExports() {
			exports = append(exports, e.GetVolumeId())
		}
		if token = le.GetNextPageToken(); token == "" {
			break
		}
	}
	for token, pages := "", 0; ; pages++ {
		lv, err := h.c.ListVolumes(ctxT(t), &agentv1.ListVolumesRequest{Store: lvmStore, PageSize: 2, PageToken: token})
		if err != nil || pages > 5 {
			t.Fatalf("ListVolumes page %d: %v, %v", pages, lv, err)
		}
		for _, v := range lv.GetVolumes() {
			volumes = append(volumes, v.GetVolumeId())
		}
		if token = lv.GetNextPageToken(); token == "" {
			break
		}
	}
	if fmt.Sprint(exports) != fmt.Sprint(want) || fmt.Sprint(volumes) != fmt.Sprint(want) {
		t.Errorf("pages listed exports %v and volumes %v, want %v", exports, volumes, want)
	}
	if _, err := h.c.ListVolumes(ctxT(t), &agentv1.ListVolumesRequest{Store: lvmStore, PageSize: 5000}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ListVolumes with page_size 5000: %v, want INVALID_ARGUMENT", err)
	}
}
