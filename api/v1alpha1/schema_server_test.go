package v1alpha1_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// The short names must not shadow any resource the API server already
// serves: `kubectl get <short name>` would silently pick one of the two.
// Checked against the real discovery document, so a built-in added in a
// later Kubernetes release is caught when the pinned version moves.
func TestNamesDoNotCollideWithServedResources(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	taken := map[string]string{} // name or short name -> group/resource that has it
	var ours []metav1.APIResource
	status := map[string]bool{}
	for _, l := range lists {
		gv := strings.SplitN(l.GroupVersion, "/", 2)[0]
		for _, r := range l.APIResources {
			if base, sub, ok := strings.Cut(r.Name, "/"); ok {
				if gv == v1alpha1.GroupName && sub == "status" {
					status[base] = true
				}
				continue
			}
			if gv == v1alpha1.GroupName {
				ours = append(ours, r)
				continue
			}
			for _, n := range append([]string{r.Name, r.SingularName}, r.ShortNames...) {
				taken[n] = gv + "/" + r.Name
			}
		}
	}
	want := map[string]string{
		"pillaragents": "pagent", "pillarstores": "pstore", "pillarprotocols": "pproto",
		"pillarstorageclasses": "psc", "pillarvolumestates": "pvstate", "pillarsnapshotstates": "snapstate",
	}
	if len(ours) != len(want) {
		t.Fatalf("served pillar-csi.io resources: %v, want %d", ours, len(want))
	}
	for _, r := range ours {
		if got := r.ShortNames; !slices.Equal(got, []string{want[r.Name]}) {
			t.Errorf("%s: short names %v, want [%s]", r.Name, got, want[r.Name])
		}
		for _, n := range append([]string{r.Name, r.SingularName}, r.ShortNames...) {
			if other, dup := taken[n]; dup {
				t.Errorf("%s: %q is already %s", r.Name, n, other)
			}
		}
		if r.Namespaced {
			t.Errorf("%s is namespaced, want cluster-scoped", r.Name)
		}
		// kubectl get pillar lists what an operator declares; the
		// volume records stay out of it, so that kubectl delete pillar
		// --all cannot condemn every volume.
		wantCategory := "pillar"
		if r.Name == "pillarvolumestates" || r.Name == "pillarsnapshotstates" {
			wantCategory = "pillar-volumes"
		}
		if !slices.Equal(r.Categories, []string{wantCategory}) {
			t.Errorf("%s: categories %v, want [%s]", r.Name, r.Categories, wantCategory)
		}
		if !status[r.Name] {
			t.Errorf("%s has no status subresource", r.Name)
		}
	}
}

// Fields left out get the documented defaults, and an explicit false is
// kept (a defaulted boolean that dropped false would turn ACLs back on).
func TestDefaults(t *testing.T) {
	c := ctx(t)
	a := &v1alpha1.PillarAgent{}
	a.Name, a.Spec.NodeName = "defaults-agent", "storage-1"
	p := &v1alpha1.PillarProtocol{}
	p.Name, p.Spec.Type = "defaults-protocol", v1alpha1.ProtocolNVMeOFTCP
	p.Spec.NVMeOFTCP = &v1alpha1.NVMeOFTCPProtocol{BindAddress: "::"}
	open := protocol("defaults-open")
	open.Spec.NVMeOFTCP.ACLEnabled = ptr.To(false)
	sc := &v1alpha1.PillarStorageClass{}
	sc.Name, sc.Spec.StoreName, sc.Spec.ProtocolName = "defaults-class", "zfs-tank", "nvmeof"
	vs := volumeState("defaults-volume")
	vs.Spec.PublicationGeneration = 0
	for _, o := range []client.Object{a, p, open, sc, vs} {
		if err := k8s.Create(c, o, strict); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("PillarAgent spec.port", a.Spec.Port, int32(v1alpha1.DefaultAgentPort))
	check("PillarProtocol spec.nvmeofTCP.port", p.Spec.NVMeOFTCP.Port, int32(v1alpha1.DefaultNVMeOFTCPPort))
	check("PillarProtocol spec.nvmeofTCP.aclEnabled", *p.Spec.NVMeOFTCP.ACLEnabled, true)
	check("explicit aclEnabled: false", *open.Spec.NVMeOFTCP.ACLEnabled, false)
	check("PillarStorageClass spec.fsType", sc.Spec.FSType, v1alpha1.FSTypeExt4)
	check("PillarStorageClass spec.reclaimPolicy", sc.Spec.ReclaimPolicy, v1alpha1.ReclaimDelete)
	check("PillarStorageClass spec.volumeBindingMode", sc.Spec.VolumeBindingMode, v1alpha1.BindingImmediate)
	check("PillarStorageClass spec.allowVolumeExpansion", *sc.Spec.AllowVolumeExpansion, true)
	check("PillarVolumeState spec.publicationGeneration", vs.Spec.PublicationGeneration, int64(0))
}

// Removing publicationGeneration with a merge patch must not reset it: it
// defaults back to 0, which the never-decreases rule refuses.
func TestPublicationGenerationCannotBeRemoved(t *testing.T) {
	c := ctx(t)
	vs := volumeState("generation-null")
	vs.Spec.PublicationGeneration = 7
	if err := k8s.Create(c, vs, strict); err != nil {
		t.Fatal(err)
	}
	err := k8s.Patch(c, vs, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"publicationGeneration":null}}`)))
	if err == nil || !strings.Contains(err.Error(), "publicationGeneration cannot decrease") {
		t.Fatalf("removing publicationGeneration: got %v, want refused", err)
	}
}

// kubectl get shows the printer columns; read them the way kubectl does
// (as a server-side Table).
func TestPrinterColumns(t *testing.T) {
	c := ctx(t)
	vs := volumeState("columns-volume")
	vs.Annotations = map[string]string{v1alpha1.AnnotationPVCNamespace: "team-a", v1alpha1.AnnotationPVCName: "data"}
	if err := k8s.Create(c, vs, strict); err != nil {
		t.Fatal(err)
	}
	vs.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Exported", Message: "ok", LastTransitionTime: metav1.Now()}}
	vs.Status.LastFailure = &v1alpha1.OperationFailure{Operation: "ControllerPublishVolume", Code: "Unavailable", Message: "agent storage-1 unreachable", Time: metav1.Now()}
	if err := k8s.Status().Update(c, vs); err != nil {
		t.Fatal(err)
	}

	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) metav1.Table {
		t.Helper()
		req, err := http.NewRequestWithContext(c, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		var tbl metav1.Table
		if err := json.NewDecoder(resp.Body).Decode(&tbl); err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	columns := func(tbl metav1.Table) []string {
		var names []string
		for _, c := range tbl.ColumnDefinitions {
			names = append(names, c.Name)
		}
		return names
	}

	for resource, want := range map[string][]string{
		"pillaragents":         {"Name", "Node", "Address", "Port", "TLS", "Endpoint", "Version", "Ready", "Reason", "Age"},
		"pillarstores":         {"Name", "Agent", "Type", "Pool", "VG", "Total", "Available", "Ready", "Reason", "Age"},
		"pillarprotocols":      {"Name", "Type", "Address", "Port", "ACL", "Classes", "Ready", "Age"},
		"pillarstorageclasses": {"Name", "Store", "Protocol", "FSType", "Multi-Writers", "Reclaim", "StorageClass", "Ready", "Reason", "Age"},
		"pillarvolumestates":   {"Name", "Store", "Protocol", "Capacity", "Generation", "Nodes", "Multi-Writers", "Ready", "Export-Missing", "Claim-Namespace", "Claim", "Failed", "Error", "Message", "Age"},
	} {
		if got := columns(get("/apis/pillar-csi.io/v1alpha1/" + resource)); !slices.Equal(got, want) {
			t.Errorf("%s columns = %v, want %v", resource, got, want)
		}
	}

	tbl := get("/apis/pillar-csi.io/v1alpha1/pillarvolumestates/columns-volume")
	if len(tbl.Rows) != 1 {
		t.Fatalf("rows = %d, want 1", len(tbl.Rows))
	}
	row := map[string]any{}
	for i, col := range columns(tbl) {
		row[col] = tbl.Rows[0].Cells[i]
	}
	for col, want := range map[string]any{
		"Name": "columns-volume", "Store": "zfs-tank", "Protocol": "nvmeof",
		"Capacity": float64(1 << 30), "Generation": float64(1), "Nodes": "worker-1", "Multi-Writers": false, "Ready": "True",
		"Claim-Namespace": "team-a", "Claim": "data", "Failed": "ControllerPublishVolume", "Error": "Unavailable",
		"Message": "agent storage-1 unreachable",
	} {
		if row[col] != want {
			t.Errorf("column %s = %#v, want %#v", col, row[col], want)
		}
	}
}
