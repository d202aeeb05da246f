package chart

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// vapServed is what discovery lists, and so what helm install's
// Capabilities.APIVersions has, on a cluster that serves
// ValidatingAdmissionPolicy v1 (Kubernetes 1.30 and newer). helm template
// has it only when told with --api-versions.
const vapServed = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"

// allowDelete is the annotation that lets anyone RBAC lets in delete a
// PillarVolumeState: the escape hatch of a recovery procedure.
const allowDelete = "pillar-csi.io/allow-delete"

func guardName(n objectNames) string { return n.fullname + "-volumestate-guard" }

func controllerUser(namespace string, n objectNames) string {
	return "system:serviceaccount:" + namespace + ":" + n.controller
}

// TestAdmissionPolicyRendered: the policy and its binding are rendered
// where the cluster serves ValidatingAdmissionPolicy v1 and the value is on,
// naming the release's controller ServiceAccount; nowhere else.
func TestAdmissionPolicyRendered(t *testing.T) {
	served := []string{vapServed}
	present := []struct {
		name string
		rel  release
		n    objectNames
	}{
		{"served", release{name: "pillar-csi", namespace: "pillar-csi", apiVersions: served}, names("pillar-csi")},
		{"served, own release and namespace", release{name: "csi", namespace: "storage-system", apiVersions: served}, names("csi-pillar-csi")},
	}
	for _, c := range present {
		t.Run(c.name, func(t *testing.T) {
			checkAdmissionPolicy(t, render(t, c.rel), c.n)
		})
	}
	absent := []struct {
		name string
		rel  release
	}{
		// What helm template takes the cluster for unless told.
		{"helm template without the cluster's API versions", release{name: "pillar-csi", namespace: "pillar-csi"}},
		// 1.26 to 1.29 serve the policy at v1alpha1 or v1beta1 behind
		// a feature gate; the chart uses v1 alone.
		{"Kubernetes 1.29, beta API only", release{name: "pillar-csi", namespace: "pillar-csi", kubeVersion: "1.29.0",
			apiVersions: []string{"admissionregistration.k8s.io/v1beta1/ValidatingAdmissionPolicy"}}},
		{"Kubernetes 1.24, the floor", release{name: "pillar-csi", namespace: "pillar-csi", kubeVersion: "1.24.17"}},
		{"turned off", release{name: "pillar-csi", namespace: "pillar-csi", apiVersions: served,
			values: map[string]any{"admissionPolicy": map[string]any{"enabled": false}}}},
	}
	for _, c := range absent {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, c.rel)
			if len(r.find("Deployment")) == 0 {
				t.Fatal("the chart rendered no controller Deployment")
			}
			for _, k := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
				if got := r.find(k); len(got) != 0 {
					t.Errorf("%d %s rendered", len(got), k)
				}
			}
		})
	}
}

// checkAdmissionPolicy asserts the rendered policy and binding of the
// release whose objects n names.
func checkAdmissionPolicy(t *testing.T, r *rendered, n objectNames) {
	t.Helper()
	user := controllerUser(r.namespace, n)
	p := get[admissionregistrationv1.ValidatingAdmissionPolicy](t, r, "ValidatingAdmissionPolicy", guardName(n))
	if p.Namespace != "" {
		t.Errorf("policy in namespace %q: it is cluster-scoped", p.Namespace)
	}
	if fp := p.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		got := "unset"
		if fp != nil {
			got = string(*fp)
		}
		t.Errorf("failurePolicy %s, want Fail: a request the policy cannot judge would be let through", got)
	}
	wantRules := []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{v1alpha1.GroupName}, APIVersions: []string{"*"},
			// Not their /status.
			Resources: []string{"pillarvolumestates", "pillarsnapshotstates"},
		},
	}}}
	if p.Spec.MatchConstraints == nil {
		t.Fatal("policy without matchConstraints")
	}
	if diff := cmp.Diff(wantRules, p.Spec.MatchConstraints.ResourceRules); diff != "" {
		t.Errorf("policy resource rules (-want +got):\n%s", diff)
	}
	wantMatch := []admissionregistrationv1.MatchCondition{{Name: "not-pillar-controller", Expression: "request.userInfo.username != '" + user + "'"}}
	if diff := cmp.Diff(wantMatch, p.Spec.MatchConditions); diff != "" {
		t.Errorf("policy match conditions (-want +got):\n%s", diff)
	}
	if len(p.Spec.Validations) != 2 {
		t.Errorf("%d validations, want 2 (spec, delete)", len(p.Spec.Validations))
	}
	for _, v := range p.Spec.Validations {
		if v.Reason == nil || *v.Reason != metav1.StatusReasonForbidden {
			t.Errorf("validation %q: reason %v, want Forbidden", v.Expression, v.Reason)
		}
		for _, w := range []string{user, allowDelete + "=true"} {
			if !strings.Contains(v.Message, w) {
				t.Errorf("validation %q: message does not name %s: %q", v.Expression, w, v.Message)
			}
		}
	}
	b := get[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, r, "ValidatingAdmissionPolicyBinding", guardName(n))
	want := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
		PolicyName:        guardName(n),
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
	}
	if diff := cmp.Diff(want, b.Spec); diff != "" {
		t.Errorf("binding spec (-want +got):\n%s", diff)
	}
}

// TestAdmissionPolicyNamesEverySpecField: the UPDATE that states a missing
// spec.export (the ExportSpecMissing recovery) must leave every other
// field of the spec as it was; a field the expression does not name could
// be changed along with it.
func TestAdmissionPolicyNamesEverySpecField(t *testing.T) {
	n := names("pillar-csi")
	r := render(t, release{name: "pillar-csi", namespace: "pillar-csi", apiVersions: []string{vapServed}})
	p := get[admissionregistrationv1.ValidatingAdmissionPolicy](t, r, "ValidatingAdmissionPolicy", guardName(n))
	i := slices.IndexFunc(p.Spec.Variables, func(v admissionregistrationv1.Variable) bool { return v.Name == "exportStated" })
	if i < 0 {
		t.Fatalf("no variable exportStated in %+v", p.Spec.Variables)
	}
	expr := p.Spec.Variables[i].Expression
	spec := reflect.TypeFor[v1alpha1.PillarVolumeStateSpec]()
	for i := range spec.NumField() {
		f := spec.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			t.Fatalf("PillarVolumeStateSpec.%s has no JSON name", f.Name)
		}
		if name == "export" {
			continue
		}
		if same := "object.spec." + name + " == oldObject.spec." + name; !strings.Contains(expr, same) {
			t.Errorf("exportStated does not keep spec.%s: no %q in\n%s", name, same, expr)
		}
		// An optional field must not appear or vanish either.
		if present := "has(object.spec." + name + ") == has(oldObject.spec." + name + ")"; opts == "omitempty" && !strings.Contains(expr, present) {
			t.Errorf("exportStated lets spec.%s be added or removed: no %q in\n%s", name, present, expr)
		}
	}
}

// volumeState is a provisioned volume published read-write to one node;
// without export, protocol and publications it is a record of a release
// that did not record its export (ExportSpecMissing).
func volumeState(name string, withExport bool) *v1alpha1.PillarVolumeState {
	v := &v1alpha1.PillarVolumeState{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PillarVolumeStateSpec{
			VolumeID:              name,
			StoreName:             "zfs-tank",
			CapacityBytes:         1 << 30,
			PublicationGeneration: 1,
		},
	}
	if withExport {
		v.Spec.ProtocolName = "nvmeof"
		v.Spec.Export = &v1alpha1.ExportSpec{BindAddress: "192.0.2.10", Port: 4420, ACLEnabled: ptr(true)}
		v.Spec.Publications = []v1alpha1.Publication{{
			NodeID: "worker-1", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11", AccessMode: v1alpha1.AccessReadWriteOnce,
		}}
	}
	return v
}

// TestAdmissionPolicyEnforced installs the chart with helm into the
// suite's kube-apiserver, which serves ValidatingAdmissionPolicy v1, and
// changes PillarVolumeStates as a cluster administrator and as
// pillar-controller's ServiceAccount (impersonated): only the controller
// changes a spec or deletes a record; metadata and status stay writable,
// a missing export may be stated, and a record annotated
// pillar-csi.io/allow-delete=true may be deleted.
func TestAdmissionPolicyEnforced(t *testing.T) {
	const rel, ns = "guard", "chart-guard-test"
	n := names(rel + "-pillar-csi")
	policy := guardName(n)

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	as := rest.CopyConfig(restConfig)
	as.Impersonate = rest.ImpersonationConfig{UserName: controllerUser(ns, n)}
	controller, err := client.New(as, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The install command of the README: helm reads what the cluster
	// serves from its discovery. The CRDs of crds/ are in the cluster
	// already (the suite applied the same files), so helm skips them.
	if out, err := helmRun(t, "install", rel, chartDir, "--kubeconfig", kubeconfig, "--namespace", ns, "--create-namespace"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	uninstallOnCleanup(t, rel, ns)
	if err := admin.Get(ctx(t), client.ObjectKey{Name: policy}, &admissionregistrationv1.ValidatingAdmissionPolicy{}); err != nil {
		t.Fatalf("helm install on a cluster serving %s: %v", vapServed, err)
	}
	if err := admin.Get(ctx(t), client.ObjectKey{Name: policy}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}); err != nil {
		t.Fatalf("helm install on a cluster serving %s: %v", vapServed, err)
	}

	full, byController, legacy := volumeState("pvc-guard-admin", true), volumeState("pvc-guard-controller", true), volumeState("pvc-guard-legacy", false)
	for _, v := range []*v1alpha1.PillarVolumeState{full, byController, legacy} {
		if err := admin.Create(ctx(t), v); err != nil {
			t.Fatalf("creating PillarVolumeState %s as the administrator: %v", v.Name, err)
		}
	}
	// Before the uninstall (cleanups run last in first out), as the
	// controller, whom the policy and RBAC still let delete.
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, v := range []*v1alpha1.PillarVolumeState{full, byController, legacy} {
			if err := controller.Delete(c, v.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: deleting PillarVolumeState %s as the controller: %v", v.Name, err)
			}
		}
	})

	// denied reports whether err is the policy's refusal; an RBAC
	// refusal is Forbidden too, but names no policy.
	denied := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
	}
	merge := func(patch string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(patch)) }
	grow := merge(`{"spec":{"capacityBytes":2147483648}}`)
	fetch := func(v *v1alpha1.PillarVolumeState) (*v1alpha1.PillarVolumeState, error) {
		got := &v1alpha1.PillarVolumeState{}
		return got, admin.Get(ctx(t), client.ObjectKeyFromObject(v), got)
	}
	mustFetch := func(v *v1alpha1.PillarVolumeState) *v1alpha1.PillarVolumeState {
		t.Helper()
		got, err := fetch(v)
		if err != nil {
			t.Fatalf("PillarVolumeState %s: %v", v.Name, err)
		}
		return got
	}
	wantDenied := func(what string, err error) {
		t.Helper()
		if !denied(err) {
			t.Fatalf("%s: got %v, want the refusal of %s", what, err, policy)
		}
		if !strings.Contains(err.Error(), allowDelete+"=true") {
			t.Errorf("%s: the refusal does not name the escape hatch %s=true: %v", what, allowDelete, err)
		}
	}

	// The API server enforces a new policy once its informers have it and
	// the binding: wait for the first refusal, of a dry run.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := admin.Patch(ctx(t), full.DeepCopy(), grow, client.DryRunAll)
		if denied(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the administrator's spec change was not refused within 30 s of the install; last answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	t.Run("administrator", func(t *testing.T) {
		wantDenied("spec change", admin.Patch(ctx(t), full.DeepCopy(), grow))
		if got := mustFetch(full).Spec.CapacityBytes; got != full.Spec.CapacityBytes {
			t.Errorf("capacityBytes %d after the refused change, want %d", got, full.Spec.CapacityBytes)
		}
		wantDenied("publication removed", admin.Patch(ctx(t), full.DeepCopy(), merge(`{"spec":{"publications":null}}`)))

		if err := admin.Patch(ctx(t), full.DeepCopy(), merge(`{"metadata":{"annotations":{"example.com/note":"checked"},"labels":{"example.com/team":"storage"}}}`)); err != nil {
			t.Errorf("annotation and label refused: %v", err)
		} else if got := mustFetch(full); got.Annotations["example.com/note"] != "checked" || got.Labels["example.com/team"] != "storage" {
			t.Errorf("annotations %v, labels %v after the metadata patch", got.Annotations, got.Labels)
		}
		for _, fin := range []string{`["example.com/hold"]`, `null`} {
			if err := admin.Patch(ctx(t), full.DeepCopy(), merge(`{"metadata":{"finalizers":`+fin+`}}`)); err != nil {
				t.Errorf("finalizers %s refused: %v", fin, err)
			}
		}
		if err := admin.Status().Patch(ctx(t), full.DeepCopy(), merge(`{"status":{"capacityBytes":1073741824}}`)); err != nil {
			t.Errorf("status subresource patch refused: %v", err)
		}

		wantDenied("delete", admin.Delete(ctx(t), full.DeepCopy()))
		// kubectl delete pvstate --all: the API server deletes item by
		// item, each through admission.
		if err := admin.DeleteAllOf(ctx(t), &v1alpha1.PillarVolumeState{}); !denied(err) {
			t.Errorf("delete of every PillarVolumeState: got %v, want the refusal of %s", err, policy)
		}
		for _, v := range []*v1alpha1.PillarVolumeState{full, byController, legacy} {
			if got, err := fetch(v); err != nil || !got.DeletionTimestamp.IsZero() {
				t.Errorf("PillarVolumeState %s after the refused deletes: %v, deletionTimestamp %v", v.Name, err, got.DeletionTimestamp)
			}
		}
		if err := admin.Patch(ctx(t), full.DeepCopy(), merge(`{"metadata":{"annotations":{"`+allowDelete+`":"yes"}}}`)); err != nil {
			t.Fatal(err)
		}
		wantDenied("delete annotated "+allowDelete+"=yes", admin.Delete(ctx(t), full.DeepCopy()))
	})

	t.Run("snapshot record", func(t *testing.T) {
		snap := &v1alpha1.PillarSnapshotState{
			ObjectMeta: metav1.ObjectMeta{Name: "snapshot-guard"},
			Spec:       v1alpha1.PillarSnapshotStateSpec{SnapshotID: "snapshot-guard", SourceVolumeID: full.Name, StoreName: "zfs-fast"},
		}
		if err := admin.Create(ctx(t), snap); err != nil {
			t.Fatalf("creating PillarSnapshotState as the administrator: %v", err)
		}
		t.Cleanup(func() {
			if err := controller.Delete(context.Background(), snap.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: deleting PillarSnapshotState as the controller: %v", err)
			}
		})
		wantDenied("snapshot record delete", admin.Delete(ctx(t), snap.DeepCopy()))
		if err := admin.DeleteAllOf(ctx(t), &v1alpha1.PillarSnapshotState{}); !denied(err) {
			t.Errorf("delete of every PillarSnapshotState: got %v, want the refusal of %s", err, policy)
		}
		if err := admin.Status().Patch(ctx(t), snap.DeepCopy(), merge(`{"status":{"readyToUse":true}}`)); err != nil {
			t.Errorf("status subresource patch refused: %v", err)
		}
		if err := controller.Delete(ctx(t), snap.DeepCopy()); err != nil {
			t.Errorf("the controller's delete of a PillarSnapshotState: %v", err)
		}
	})

	t.Run("ExportSpecMissing recovery", func(t *testing.T) {
		example, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "examples", "recovery", "export-spec-patch.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		patch, err := yaml.YAMLToJSON(example)
		if err != nil {
			t.Fatal(err)
		}
		// Stating the export is no license to change the rest.
		wantDenied("export stated with a grown capacity", admin.Patch(ctx(t), legacy.DeepCopy(),
			merge(`{"spec":{"capacityBytes":2147483648,"export":{"bindAddress":"192.0.2.10","port":4420,"aclEnabled":true}}}`)))
		wantDenied("export stated with a publication", admin.Patch(ctx(t), legacy.DeepCopy(),
			merge(`{"spec":{"publications":[{"nodeID":"worker-2","hostNQN":"nqn.2014-08.org.nvmexpress:uuid:0e7e1c53-2d57-4cc4-8b6f-4b1f5f3c2b22","accessMode":"ReadWriteOnce"}],"export":{"bindAddress":"192.0.2.10","port":4420,"aclEnabled":true}}}`)))
		// docs/troubleshooting.md's kubectl patch --type merge --patch-file.
		if err := admin.Patch(ctx(t), legacy.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("the recovery procedure's patch (deploy/examples/recovery/export-spec-patch.yaml) refused: %v", err)
		}
		if got := mustFetch(legacy).Spec.Export; got == nil || got.Port != 4420 {
			t.Errorf("export %+v after the recovery patch", got)
		}
		wantDenied("export stated again", admin.Patch(ctx(t), legacy.DeepCopy(), merge(`{"spec":{"export":{"port":4421}}}`)))
	})

	t.Run("pillar-controller", func(t *testing.T) {
		// RBAC takes the chart's bindings a moment after the install too.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := controller.Patch(ctx(t), byController.DeepCopy(), grow)
			if err == nil {
				break
			}
			if denied(err) || !apierrors.IsForbidden(err) || time.Now().After(deadline) {
				t.Fatalf("the controller's spec change: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got := mustFetch(byController).Spec.CapacityBytes; got != 2<<30 {
			t.Errorf("capacityBytes %d after the controller's change, want %d", got, 2<<30)
		}
		if err := controller.Delete(ctx(t), byController.DeepCopy()); err != nil {
			t.Fatalf("the controller's delete: %v", err)
		}
		if _, err := fetch(byController); !apierrors.IsNotFound(err) {
			t.Errorf("PillarVolumeState %s after the controller's delete: %v, want not found", byController.Name, err)
		}
	})

	t.Run("escape hatch", func(t *testing.T) {
		if err := admin.Patch(ctx(t), full.DeepCopy(), merge(`{"metadata":{"annotations":{"`+allowDelete+`":"true"}}}`)); err != nil {
			t.Fatalf("annotating %s=true: %v", allowDelete, err)
		}
		if err := admin.Delete(ctx(t), full.DeepCopy()); err != nil {
			t.Fatalf("delete of a record annotated %s=true: %v", allowDelete, err)
		}
		if _, err := fetch(full); !apierrors.IsNotFound(err) {
			t.Errorf("PillarVolumeState %s after the delete: %v, want not found", full.Name, err)
		}
	})
}

// uninstallOnCleanup uninstalls a release when the test ends, unless the
// test did (--ignore-not-found). Not with helmRun: t.Context() is
// cancelled before cleanups run.
func uninstallOnCleanup(t *testing.T, rel, ns string) {
	t.Helper()
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := helmCommand(c, nil, "uninstall", rel, "--kubeconfig", kubeconfig, "--namespace", ns, "--wait", "--ignore-not-found")
		if err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	})
}
