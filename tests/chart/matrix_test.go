package chart

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pillar-csi/pillar-csi/api/agentauth"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// A case of the values matrix: what to render and what must hold of it.
// Every case is also dry-run applied (TestDryRunApply).
type matrixCase struct {
	name  string
	rel   release
	check func(t *testing.T, r *rendered)
}

// The storage nodes of the cases with PillarAgents: one reached through
// its Node's InternalIP, one at an IP address, one at a DNS name on a port
// of its own.
var storageNodes = []any{
	map[string]any{"name": "storage-1", "nodeName": "storage-1"},
	map[string]any{"name": "storage-2", "nodeName": "storage-2", "address": "192.0.2.20"},
	map[string]any{"name": "storage-3", "address": "storage-3.example.net", "port": 9500},
}

// certManagerNodes are the storage nodes of the tls.mode certManager
// case, and certManagerNames what each node's certificate must name (DNS
// names, then IP addresses) and no other node's may.
var (
	certManagerNodes = []any{
		map[string]any{"name": "storage-1", "nodeName": "storage-1"},
		map[string]any{"name": "storage-2", "nodeName": "storage-2", "address": "192.0.2.20"},
		map[string]any{"name": "storage-4", "nodeName": "storage-4", "address": "storage-4.example.net", "serverName": "agent-4.example.net"},
	}
	certManagerNames = map[string][2][]string{
		"storage-1": {{"storage-1"}, nil},
		"storage-2": {{"storage-2"}, {"192.0.2.20"}},
		"storage-4": {{"storage-4", "storage-4.example.net", "agent-4.example.net"}, nil},
	}
)

func matrix() []matrixCase {
	def := release{name: "pillar-csi", namespace: "pillar-csi"}
	return []matrixCase{
		{name: "defaults", rel: def, check: func(t *testing.T, r *rendered) {
			n := names("pillar-csi")
			checkCommon(t, r, n, defaultImages("0.1.0"), "/var/lib/kubelet")
			checkAgent(t, r, n, "", []string{"^/dev/zd", "^/dev/nvme"})
			if got := r.find("PillarAgent"); len(got) != 0 {
				t.Errorf("%d PillarAgents rendered without storageNodes", len(got))
			}
			for _, k := range []string{"Certificate", "Issuer"} {
				if got := r.find(k); len(got) != 0 {
					t.Errorf("%d %ss rendered with tls.mode none", len(got), k)
				}
			}
			pdb := get[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", n.controller)
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudget maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
			}
			want := map[string]string{"app.kubernetes.io/name": "pillar-csi", "app.kubernetes.io/instance": "pillar-csi", "app.kubernetes.io/component": "controller"}
			if diff := cmp.Diff(want, pdb.Spec.Selector.MatchLabels); diff != "" {
				t.Errorf("PodDisruptionBudget selector (-want +got):\n%s", diff)
			}
		}},
		{name: "ValidatingAdmissionPolicy served", rel: release{name: "pillar-csi", namespace: "pillar-csi", apiVersions: []string{vapServed}},
			check: func(t *testing.T, r *rendered) {
				n := names("pillar-csi")
				checkCommon(t, r, n, defaultImages("0.1.0"), "/var/lib/kubelet")
				checkAdmissionPolicy(t, r, n)
			}},
		{name: "snapshots served, snapshot controller on", rel: release{name: "pillar-csi", namespace: "pillar-csi", apiVersions: []string{snapshotsServed},
			values: map[string]any{"snapshots": map[string]any{"controller": map[string]any{"enabled": true},
				"volumeSnapshotClass": map[string]any{"isDefault": true, "deletionPolicy": "Retain"}}}},
			check: func(t *testing.T, r *rendered) {
				n := names("pillar-csi")
				img := defaultImages("0.1.0")
				img.snapshotter = "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0"
				checkCommon(t, r, n, img, "/var/lib/kubelet")
				checkSnapshots(t, r, n, "Retain", true)
			}},
		{name: "snapshots served, sidecar and class off", rel: release{name: "pillar-csi", namespace: "pillar-csi", apiVersions: []string{snapshotsServed},
			values: map[string]any{"controller": map[string]any{"snapshotter": map[string]any{"enabled": false}},
				"snapshots": map[string]any{"volumeSnapshotClass": map[string]any{"create": "false"}}}},
			check: func(t *testing.T, r *rendered) {
				n := names("pillar-csi")
				checkCommon(t, r, n, defaultImages("0.1.0"), "/var/lib/kubelet")
				if len(r.find("VolumeSnapshotClass")) != 0 {
					t.Error("a VolumeSnapshotClass rendered with create: false")
				}
			}},
		{name: "cert-manager mTLS", rel: release{name: "pillar-csi", namespace: "pillar-csi", values: map[string]any{
			"tls":          map[string]any{"mode": "certManager"},
			"storageNodes": certManagerNodes,
		}}, check: func(t *testing.T, r *rendered) {
			n := names("pillar-csi")
			checkCommon(t, r, n, defaultImages("0.1.0"), "/var/lib/kubelet")
			checkPerNodeAgents(t, r, n, map[string]string{"storage-1": "pillar-csi-agent-tls-storage-1", "storage-2": "pillar-csi-agent-tls-storage-2",
				"storage-4": "pillar-csi-agent-tls-storage-4"})
			checkPillarAgents(t, r, "pillar-csi-controller-client-tls", "pillar-csi", "storage-1", "storage-2", "storage-4")
			checkCertManager(t, r)
		}},
		{name: "chart-generated mTLS", rel: release{name: "pillar-csi", namespace: "pillar-csi", values: map[string]any{
			"tls":          map[string]any{"mode": "generated"},
			"storageNodes": generatedNodes,
		}}, check: func(t *testing.T, r *rendered) {
			n := names("pillar-csi")
			checkCommon(t, r, n, defaultImages("0.1.0"), "/var/lib/kubelet")
			checkGeneratedTLS(t, r, n)
		}},
		{name: "Secret mTLS, a Secret per storage node", rel: release{name: "pillar-csi", namespace: "pillar-csi", values: map[string]any{
			"tls": map[string]any{"mode": "secret", "secret": map[string]any{"controllerSecretName": "my-controller-tls"}},
			"storageNodes": []any{
				map[string]any{"name": "storage-1", "nodeName": "storage-1", "agentSecretName": "tls-of-storage-1"},
				map[string]any{"name": "storage-2", "nodeName": "storage-2", "address": "192.0.2.20", "agentSecretName": "tls-of-storage-2"},
			},
		}}, check: func(t *testing.T, r *rendered) {
			n := names("pillar-csi")
			checkCommon(t, r, n, defaultImages("0.1.0"), "/var/lib/kubelet")
			checkPerNodeAgents(t, r, n, map[string]string{"storage-1": "tls-of-storage-1", "storage-2": "tls-of-storage-2"})
			checkPillarAgents(t, r, "my-controller-tls", "pillar-csi", "storage-1", "storage-2")
			if got := r.find("Certificate"); len(got) != 0 {
				t.Errorf("%d Certificates rendered with tls.mode secret", len(got))
			}
		}},
		{name: "Secret mTLS, one Secret for all agents", rel: release{name: "pillar-csi", namespace: "pillar-csi", values: map[string]any{
			"tls": map[string]any{"mode": "secret", "secret": map[string]any{
				"agentSecretName": "my-agent-tls", "controllerSecretName": "my-controller-tls"}},
			"storageNodes": storageNodes,
		}}, check: func(t *testing.T, r *rendered) {
			n := names("pillar-csi")
			checkCommon(t, r, n, defaultImages("0.1.0"), "/var/lib/kubelet")
			checkAgent(t, r, n, "my-agent-tls", []string{"^/dev/zd", "^/dev/nvme"})
			checkPillarAgents(t, r, "my-controller-tls", "pillar-csi")
			if got := r.find("Certificate"); len(got) != 0 {
				t.Errorf("%d Certificates rendered with tls.mode secret", len(got))
			}
		}},
		{name: "custom images, kubelet dir and namespace", rel: release{name: "csi", namespace: "storage-system", values: map[string]any{
			"kubeletDir":       "/var/lib/k0s/kubelet/",
			"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
			"controller": map[string]any{
				"image":               map[string]any{"repository": "registry.example/pc", "tag": "v9", "pullPolicy": "Always"},
				"tlsSecretNamespaces": []any{"storage-system", "tls"},
				"provisioner":         map[string]any{"image": map[string]any{"repository": "registry.example/prov", "tag": "p1", "pullPolicy": "Always"}},
				"attacher":            map[string]any{"image": map[string]any{"repository": "registry.example/att", "tag": "a1", "pullPolicy": "Always"}},
				"resizer":             map[string]any{"image": map[string]any{"repository": "registry.example/res", "tag": "r1", "pullPolicy": "Always"}},
			},
			"agent": map[string]any{
				"image":     map[string]any{"repository": "registry.example/pa", "tag": "v9", "pullPolicy": "Always"},
				"lvmReject": []any{"^/dev/zd"},
				// Helm merges maps: the default label goes only when unset.
				"nodeSelector": map[string]any{"node-role.example/storage": "", "pillar-csi.io/storage-node": nil},
			},
			"node": map[string]any{"image": map[string]any{"repository": "registry.example/pn", "tag": "v9", "pullPolicy": "Always"}},
		}}, check: func(t *testing.T, r *rendered) {
			n := names("csi-pillar-csi")
			imgs := images{
				controller: "registry.example/pc:v9", agent: "registry.example/pa:v9", node: "registry.example/pn:v9",
				provisioner: "registry.example/prov:p1", attacher: "registry.example/att:a1", resizer: "registry.example/res:r1",
				pullPolicy: corev1.PullAlways,
			}
			checkCommon(t, r, n, imgs, "/var/lib/k0s/kubelet")
			checkAgent(t, r, n, "", []string{"^/dev/zd"})
			ds := get[appsv1.DaemonSet](t, r, "DaemonSet", n.agent)
			if diff := cmp.Diff(map[string]string{"node-role.example/storage": ""}, ds.Spec.Template.Spec.NodeSelector); diff != "" {
				t.Errorf("agent nodeSelector (-want +got):\n%s", diff)
			}
			for _, o := range r.objects {
				// The one exception: the right to read the agents' TLS
				// Secrets in the other namespace of tlsSecretNamespaces.
				if o.GetNamespace() != "" && o.GetNamespace() != "storage-system" && o.GetName() != n.controller+"-tls-secrets" {
					t.Errorf("%s %s in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
				}
			}
			d := get[appsv1.Deployment](t, r, "Deployment", n.controller)
			c := container(t, d.Spec.Template.Spec.Containers, "pillar-controller")
			wantArg(t, "pillar-controller", c.Args, "-tls-secret-namespaces=storage-system,tls")
			for _, pod := range []corev1.PodSpec{d.Spec.Template.Spec, ds.Spec.Template.Spec, get[appsv1.DaemonSet](t, r, "DaemonSet", n.node).Spec.Template.Spec} {
				if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: "regcred"}}, pod.ImagePullSecrets); diff != "" {
					t.Errorf("imagePullSecrets (-want +got):\n%s", diff)
				}
			}
		}},
		{name: "images by digest", rel: release{name: "pillar-csi", namespace: "pillar-csi", values: map[string]any{
			"controller": map[string]any{
				"image":       map[string]any{"repository": "registry.example:5000/pc", "tag": "v9", "digest": testDigest("pc")},
				"provisioner": map[string]any{"image": map[string]any{"repository": "registry.example:5000/prov", "digest": testDigest("prov")}},
				"attacher":    map[string]any{"image": map[string]any{"repository": "registry.example:5000/att", "digest": testDigest("att")}},
				"resizer":     map[string]any{"image": map[string]any{"repository": "registry.example:5000/res", "digest": testDigest("res")}},
			},
			"agent": map[string]any{"image": map[string]any{"repository": "registry.example:5000/pa", "digest": testDigest("pa")}},
			"node":  map[string]any{"image": map[string]any{"repository": "registry.example:5000/pn", "digest": testDigest("pn")}},
		}}, check: func(t *testing.T, r *rendered) {
			// A digest wins over any tag: what was pushed is what runs.
			n := names("pillar-csi")
			checkCommon(t, r, n, images{
				controller: "registry.example:5000/pc@" + testDigest("pc"), agent: "registry.example:5000/pa@" + testDigest("pa"),
				node: "registry.example:5000/pn@" + testDigest("pn"), provisioner: "registry.example:5000/prov@" + testDigest("prov"),
				attacher: "registry.example:5000/att@" + testDigest("att"), resizer: "registry.example:5000/res@" + testDigest("res"),
				pullPolicy: corev1.PullIfNotPresent,
			}, "/var/lib/kubelet")
		}},
		{name: "own agent token, IPv6 bind address", rel: release{name: "pillar-csi", namespace: "pillar-csi", values: map[string]any{
			"agent": map[string]any{"bindAddress": "fd00::5", "auth": map[string]any{"existingSecret": "my-agent-token"}},
		}}, check: func(t *testing.T, r *rendered) {
			n := names("pillar-csi")
			if r.has("Secret", n.fullname+"-agent-token") {
				t.Error("the chart generated a token beside agent.auth.existingSecret")
			}
			agent := get[appsv1.DaemonSet](t, r, "DaemonSet", n.agent).Spec.Template.Spec
			c := container(t, agent.Containers, "pillar-agent")
			wantArg(t, c.Name, c.Args, "-listen-address=[fd00::5]:9420")
			wantArg(t, c.Name, c.Args, "-metrics-address=[fd00::5]:9421")
			wantTokenSecret(t, agent, c, "my-agent-token")
			ctrl := get[appsv1.Deployment](t, r, "Deployment", n.controller).Spec.Template.Spec
			wantTokenSecret(t, ctrl, container(t, ctrl.Containers, "pillar-controller"), "my-agent-token")
		}},
		{name: "storage nodes, no agent, no PDB", rel: release{name: "pillar-csi", namespace: "pillar-csi", values: map[string]any{
			"agent":        map[string]any{"enabled": false},
			"controller":   map[string]any{"podDisruptionBudget": map[string]any{"enabled": false}},
			"storageNodes": storageNodes,
		}}, check: func(t *testing.T, r *rendered) {
			n := names("pillar-csi")
			checkCommon(t, r, n, defaultImages("0.1.0"), "/var/lib/kubelet")
			checkPillarAgents(t, r, "", "")
			if r.has("DaemonSet", n.agent) || r.has("ServiceAccount", n.agent) {
				t.Error("agent DaemonSet or ServiceAccount rendered with agent.enabled false")
			}
			if got := r.find("PodDisruptionBudget"); len(got) != 0 {
				t.Error("PodDisruptionBudget rendered while disabled")
			}
		}},
	}
}

func TestMatrix(t *testing.T) {
	for _, c := range matrix() {
		t.Run(c.name, func(t *testing.T) {
			c.check(t, render(t, c.rel))
		})
	}
}

// objectNames are the names of the chart's objects for one fullname.
type objectNames struct{ fullname, controller, agent, node string }

func names(fullname string) objectNames {
	return objectNames{fullname, fullname + "-controller", fullname + "-agent", fullname + "-node"}
}

// testDigest is a well-formed digest that names s.
func testDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

type images struct {
	controller, agent, node, provisioner, attacher, resizer string
	// snapshotter is csi-snapshotter's image where the case runs it,
	// empty where it must not (the snapshot API is not served).
	snapshotter string
	pullPolicy  corev1.PullPolicy
}

func defaultImages(appVersion string) images {
	return images{
		controller:  "ghcr.io/pillar-csi/pillar-controller:" + appVersion,
		agent:       "ghcr.io/pillar-csi/pillar-agent:" + appVersion,
		node:        "ghcr.io/pillar-csi/pillar-node:" + appVersion,
		provisioner: "registry.k8s.io/sig-storage/csi-provisioner:v6.4.0",
		attacher:    "registry.k8s.io/sig-storage/csi-attacher:v4.13.0",
		resizer:     "registry.k8s.io/sig-storage/csi-resizer:v2.3.0",
		pullPolicy:  corev1.PullIfNotPresent,
	}
}

// checkCommon asserts what every case renders the same way: the CSIDriver,
// the controller Deployment and its RBAC, the node DaemonSet.
func checkCommon(t *testing.T, r *rendered, n objectNames, img images, kubeletDir string) {
	t.Helper()
	checkCSIDriver(t, r)
	checkController(t, r, n, img)
	checkControllerRBAC(t, r, n)
	checkNode(t, r, n, img, kubeletDir)
	for _, o := range r.objects {
		if o.GetLabels()["app.kubernetes.io/name"] != "pillar-csi" {
			t.Errorf("%s %s lacks the chart's labels", o.GetKind(), o.GetName())
		}
	}
}

func checkCSIDriver(t *testing.T, r *rendered) {
	t.Helper()
	d := get[storagev1.CSIDriver](t, r, "CSIDriver", "pillar-csi.io")
	file := storagev1.FileFSGroupPolicy
	want := storagev1.CSIDriverSpec{
		AttachRequired:       ptr(true),
		PodInfoOnMount:       ptr(false),
		FSGroupPolicy:        &file,
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		StorageCapacity:      ptr(false),
		RequiresRepublish:    ptr(false),
	}
	if diff := cmp.Diff(want, d.Spec); diff != "" {
		t.Errorf("CSIDriver spec (-want +got):\n%s", diff)
	}
}

func checkController(t *testing.T, r *rendered, n objectNames, img images) {
	t.Helper()
	d := get[appsv1.Deployment](t, r, "Deployment", n.controller)
	if d.Namespace != r.namespace {
		t.Errorf("Deployment namespace %q, want %q", d.Namespace, r.namespace)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != n.controller {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, n.controller)
	}
	if pod.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	if pod.HostNetwork {
		t.Error("controller uses hostNetwork")
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("controller pod does not run as non-root: %+v", sc)
	}
	wantContainers := []string{"pillar-controller", "csi-provisioner", "csi-attacher", "csi-resizer"}
	if img.snapshotter != "" {
		wantContainers = append(wantContainers, "csi-snapshotter")
	}
	if got := containerNames(pod.Containers); !slices.Equal(got, wantContainers) {
		t.Errorf("containers %v, want %v", got, wantContainers)
	}
	socket := volume(t, pod.Volumes, "socket-dir")
	if socket.EmptyDir == nil {
		t.Errorf("socket-dir is not an emptyDir: %+v", socket.VolumeSource)
	}
	for _, c := range pod.Containers {
		mountAt(t, c, "socket-dir", "/csi")
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: securityContext %+v", c.Name, sc)
		}
		if c.ImagePullPolicy != img.pullPolicy {
			t.Errorf("%s: imagePullPolicy %q, want %q", c.Name, c.ImagePullPolicy, img.pullPolicy)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: no memory request or limit", c.Name)
		}
	}

	c := container(t, pod.Containers, "pillar-controller")
	wantImage(t, c, img.controller)
	for _, a := range []string{"-csi-endpoint=unix:///csi/csi.sock", "-leader-elect=true", "-namespace=$(POD_NAMESPACE)",
		"-leader-election-id=pillar-controller.pillar-csi.io", "-metrics-address=:9430", "-health-address=:9431", "-log-level=info"} {
		wantArg(t, c.Name, c.Args, a)
	}
	if !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "-tls-secret-namespaces=") }) {
		t.Errorf("%s: no -tls-secret-namespaces in %q", c.Name, c.Args)
	}
	wantArg(t, c.Name, c.Args, "-agent-token-file=/etc/pillar-csi/agent-token/token")
	wantTokenMount(t, r, n, pod, c)
	wantEnvFieldRef(t, c, "POD_NAMESPACE", "metadata.namespace")
	wantPort(t, c, "metrics", 9430)
	wantPort(t, c, "health", 9431)
	wantHTTPProbe(t, c.Name, "liveness", c.LivenessProbe, "/healthz", "health")
	wantHTTPProbe(t, c.Name, "readiness", c.ReadinessProbe, "/readyz", "health")
	wantHTTPProbe(t, c.Name, "startup", c.StartupProbe, "/healthz", "health")
	if p := c.StartupProbe; p != nil && p.PeriodSeconds*p.FailureThreshold < 120 {
		t.Errorf("%s: the startup probe allows %ds for the caches to sync, want at least 120s", c.Name, p.PeriodSeconds*p.FailureThreshold)
	}
	// A node starved of CPU by a burst left the probe unanswered for over
	// two minutes in the lab; a restart then fails every call in flight.
	if p := c.LivenessProbe; p != nil && p.PeriodSeconds*p.FailureThreshold < 300 {
		t.Errorf("%s: the liveness probe restarts after %ds without an answer, want at least 300s", c.Name, p.PeriodSeconds*p.FailureThreshold)
	}

	sidecars := map[string][]string{
		"csi-provisioner": {"--extra-create-metadata", "--default-fstype=ext4", "--timeout=10m"},
		"csi-attacher":    {"--timeout=60s"},
		"csi-resizer":     {"--timeout=60s", "--handle-volume-inuse-error=false"},
	}
	sidecarImages := map[string]string{"csi-provisioner": img.provisioner, "csi-attacher": img.attacher, "csi-resizer": img.resizer}
	if img.snapshotter != "" {
		sidecars["csi-snapshotter"] = []string{"--extra-create-metadata", "--timeout=5m"}
		sidecarImages["csi-snapshotter"] = img.snapshotter
	}
	for name, extra := range sidecars {
		c := container(t, pod.Containers, name)
		wantImage(t, c, sidecarImages[name])
		for _, a := range append([]string{"--csi-address=/csi/csi.sock", "--leader-election", "--leader-election-namespace=$(POD_NAMESPACE)"}, extra...) {
			wantArg(t, name, c.Args, a)
		}
		wantEnvFieldRef(t, c, "POD_NAMESPACE", "metadata.namespace")
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--feature-gates") }) {
			t.Errorf("%s: feature gates set: %q", name, c.Args)
		}
	}
}

// checkControllerRBAC asserts that pillar-controller gets exactly the rules
// controller-gen generated, that every sidecar role is bound to the
// controller's ServiceAccount, and that no role of the chart grants a
// wildcard or lets a sidecar read Secrets.
func checkControllerRBAC(t *testing.T, r *rendered, n objectNames) {
	t.Helper()
	wantCluster, wantNS := generatedRules(t)
	cr := get[rbacv1.ClusterRole](t, r, "ClusterRole", n.controller)
	if diff := cmp.Diff(wantCluster, cr.Rules); diff != "" {
		t.Errorf("controller ClusterRole rules differ from csidriver/config/rbac/role.yaml (-want +got):\n%s", diff)
	}
	// Secrets only in the namespaces the controller reads them in (its
	// -tls-secret-namespaces, none without TLS), and nowhere cluster-wide.
	if grants(cr.Rules, "", "secrets", "get") {
		t.Error("the controller's ClusterRole lets it read every Secret")
	}
	var secretNS []string
	for _, a := range container(t, get[appsv1.Deployment](t, r, "Deployment", n.controller).Spec.Template.Spec.Containers, "pillar-controller").Args {
		if v, ok := strings.CutPrefix(a, "-tls-secret-namespaces="); ok && v != "" {
			secretNS = strings.Split(v, ",")
		}
	}
	isSecrets := func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Resources, "secrets") }
	wantRelease := wantNS
	if !slices.Contains(secretNS, r.namespace) {
		wantRelease = slices.DeleteFunc(slices.Clone(wantNS), isSecrets)
	}
	role := get[rbacv1.Role](t, r, "Role", n.controller)
	if diff := cmp.Diff(wantRelease, role.Rules); diff != "" {
		t.Errorf("controller Role rules differ from csidriver/config/rbac/role.yaml, less Secrets where it reads none (-want +got):\n%s", diff)
	}
	if role.Namespace != r.namespace {
		t.Errorf("controller Role in namespace %q, want %q", role.Namespace, r.namespace)
	}
	wantSecrets := slices.DeleteFunc(slices.Clone(wantNS), func(rule rbacv1.PolicyRule) bool { return !isSecrets(rule) })
	secretRoles := map[string]bool{}
	for _, o := range r.find("Role") {
		if o.GetName() == n.controller+"-tls-secrets" {
			secretRoles[o.GetNamespace()] = true
			var got rbacv1.Role
			if err := strictConvert(o, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantSecrets, got.Rules); diff != "" {
				t.Errorf("Role %s/%s rules (-want +got):\n%s", o.GetNamespace(), o.GetName(), diff)
			}
		}
	}
	for _, ns := range secretNS {
		if ns != r.namespace && !secretRoles[ns] {
			t.Errorf("no Role lets the controller read the TLS Secrets of namespace %s", ns)
		}
	}
	if want := len(slices.DeleteFunc(slices.Clone(secretNS), func(ns string) bool { return ns == r.namespace })); len(secretRoles) != want {
		t.Errorf("Secret Roles in %v, want one in each of %v but %s", secretRoles, secretNS, r.namespace)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: n.controller, Namespace: r.namespace}}
	roles := []string{n.controller, n.fullname + "-provisioner", n.fullname + "-attacher", n.fullname + "-resizer"}
	if slices.ContainsFunc(r.find("ClusterRole"), func(o *unstructured.Unstructured) bool { return o.GetName() == n.fullname+"-snapshotter" }) {
		roles = append(roles, n.fullname+"-snapshotter")
	}
	for _, role := range roles {
		crb := get[rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", role)
		if crb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role}) {
			t.Errorf("ClusterRoleBinding %s: roleRef %+v", role, crb.RoleRef)
		}
		if diff := cmp.Diff(subject, crb.Subjects); diff != "" {
			t.Errorf("ClusterRoleBinding %s subjects (-want +got):\n%s", role, diff)
		}
		rb := get[rbacv1.RoleBinding](t, r, "RoleBinding", role)
		if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role}) {
			t.Errorf("RoleBinding %s: roleRef %+v", role, rb.RoleRef)
		}
		if diff := cmp.Diff(subject, rb.Subjects); diff != "" {
			t.Errorf("RoleBinding %s subjects (-want +got):\n%s", role, diff)
		}
	}
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, o := range r.find(kind) {
			var rules struct {
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			if err := strictConvert(o, &rules); err != nil {
				// The typed checks above decode the same objects.
				continue
			}
			for _, rule := range rules.Rules {
				if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
					t.Errorf("%s %s grants a wildcard: %+v", kind, o.GetName(), rule)
				}
				if o.GetName() != n.controller && o.GetName() != n.controller+"-tls-secrets" && slices.Contains(rule.Resources, "secrets") {
					t.Errorf("%s %s lets a sidecar read Secrets: %+v", kind, o.GetName(), rule)
				}
			}
		}
	}
	// The provisioner has no topology to read, the attacher must read
	// CSINodes (node name → node ID) and patch VolumeAttachments.
	prov := get[rbacv1.ClusterRole](t, r, "ClusterRole", n.fullname+"-provisioner")
	if grants(prov.Rules, "", "nodes", "get") || grants(prov.Rules, "storage.k8s.io", "csinodes", "get") {
		t.Error("the provisioner may read Nodes or CSINodes, which only topology needs")
	}
	if !grants(prov.Rules, "", "persistentvolumes", "create") || !grants(prov.Rules, "storage.k8s.io", "volumeattachments", "list") {
		t.Errorf("the provisioner cannot create PVs or list VolumeAttachments: %+v", prov.Rules)
	}
	att := get[rbacv1.ClusterRole](t, r, "ClusterRole", n.fullname+"-attacher")
	if !grants(att.Rules, "storage.k8s.io", "volumeattachments/status", "patch") || !grants(att.Rules, "storage.k8s.io", "csinodes", "watch") {
		t.Errorf("the attacher cannot patch VolumeAttachment status or watch CSINodes: %+v", att.Rules)
	}
	res := get[rbacv1.ClusterRole](t, r, "ClusterRole", n.fullname+"-resizer")
	if !grants(res.Rules, "", "persistentvolumeclaims/status", "patch") || grants(res.Rules, "", "pods", "list") {
		t.Errorf("the resizer cannot patch PVC status, or may list Pods: %+v", res.Rules)
	}
}

func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
	})
}

// generatedRules reads the ClusterRole's and the Role's rules from
// controller-gen's output.
func generatedRules(t *testing.T) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "csidriver", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(data)
	if err != nil {
		t.Fatalf("role.yaml: %v", err)
	}
	for _, o := range objs {
		var v rbacv1.ClusterRole // a Role has the same fields, less one
		if err := strictConvert(o, &v); err != nil {
			t.Fatalf("role.yaml: %v", err)
		}
		switch o.GetKind() {
		case "ClusterRole":
			cluster = v.Rules
		case "Role":
			namespaced = v.Rules
		}
	}
	if cluster == nil || namespaced == nil {
		t.Fatal("role.yaml lacks the ClusterRole or the Role")
	}
	return cluster, namespaced
}

func checkNode(t *testing.T, r *rendered, n objectNames, img images, kubeletDir string) {
	t.Helper()
	ds := get[appsv1.DaemonSet](t, r, "DaemonSet", n.node)
	pod := ds.Spec.Template.Spec
	checkHostPod(t, "node", pod, n.node, r)
	if len(pod.NodeSelector) != 0 {
		t.Errorf("node DaemonSet restricted to %v; it must run on every worker", pod.NodeSelector)
	}
	plugin := kubeletDir + "/plugins/pillar-csi.io"
	wantHostPath(t, pod, "plugin-dir", plugin, corev1.HostPathDirectoryOrCreate)
	wantHostPath(t, pod, "registration-dir", kubeletDir+"/plugins_registry", corev1.HostPathDirectory)
	wantHostPath(t, pod, "kubelet-dir", kubeletDir, corev1.HostPathDirectory)
	wantHostPath(t, pod, "dev", "/dev", corev1.HostPathDirectory)
	wantHostPath(t, pod, "sys", "/sys", corev1.HostPathDirectory)
	wantHostPath(t, pod, "lib-modules", "/lib/modules", corev1.HostPathDirectory)
	wantHostPath(t, pod, "etc-nvme", "/etc/nvme", corev1.HostPathDirectoryOrCreate)
	wantHostPath(t, pod, "state-dir", "/var/lib/pillar-csi/node", corev1.HostPathDirectoryOrCreate)

	if got := containerNames(pod.InitContainers); !slices.Equal(got, []string{"modprobe", "host-nqn"}) {
		t.Errorf("node init containers %v", got)
	}
	mp := container(t, pod.InitContainers, "modprobe")
	wantImage(t, mp, img.node)
	if diff := cmp.Diff([]string{"/sbin/modprobe", "-a", "nvme_tcp", "nvme_fabrics"}, mp.Command); diff != "" {
		t.Errorf("node modprobe command (-want +got):\n%s", diff)
	}
	if m := mountAt(t, mp, "lib-modules", "/lib/modules"); m != nil && !m.ReadOnly {
		t.Error("node modprobe mounts /lib/modules read-write")
	}
	wantOnlyCaps(t, mp, "SYS_MODULE")
	nqn := container(t, pod.InitContainers, "host-nqn")
	wantOnlyCaps(t, nqn)
	wantImage(t, nqn, img.node)
	mountAt(t, nqn, "etc-nvme", "/etc/nvme")
	if len(nqn.Command) != 3 || nqn.Command[0] != "/bin/sh" || !strings.Contains(nqn.Command[2], "nvme gen-hostnqn") ||
		!strings.Contains(nqn.Command[2], "[ ! -s /etc/nvme/hostnqn ]") || !strings.Contains(nqn.Command[2], "[ ! -s /etc/nvme/hostid ]") {
		t.Errorf("host-nqn command %q", nqn.Command)
	}

	c := container(t, pod.Containers, "pillar-node")
	wantImage(t, c, img.node)
	for _, a := range []string{"-csi-endpoint=unix:///csi/csi.sock", "-node-name=$(NODE_NAME)", "-state-dir=/var/lib/pillar-csi/node",
		"-host-nqn-file=/etc/nvme/hostnqn", "-host-id-file=/etc/nvme/hostid", "-kubelet-dir=" + kubeletDir,
		"-kubelet-registration-path=" + plugin + "/csi.sock", "-plugin-registration-dir=/registration", "-health-address=:9441"} {
		wantArg(t, c.Name, c.Args, a)
	}
	wantEnvFieldRef(t, c, "NODE_NAME", "spec.nodeName")
	wantPrivileged(t, c)
	mountAt(t, c, "plugin-dir", "/csi")
	mountAt(t, c, "registration-dir", "/registration")
	if m := mountAt(t, c, "kubelet-dir", kubeletDir); m != nil && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional) {
		t.Errorf("kubelet dir mount propagation %s, want Bidirectional", deref(m.MountPropagation))
	}
	mountAt(t, c, "dev", "/dev")
	mountAt(t, c, "sys", "/sys")
	mountAt(t, c, "etc-nvme", "/etc/nvme")
	mountAt(t, c, "state-dir", "/var/lib/pillar-csi/node")
	wantPort(t, c, "health", 9441)
	wantHTTPProbe(t, c.Name, "liveness", c.LivenessProbe, "/healthz", "health")
	wantHTTPProbe(t, c.Name, "readiness", c.ReadinessProbe, "/readyz", "health")
}

// checkAgent asserts the agent DaemonSet; tlsSecret is the Secret mounted
// for mTLS, or "" for plaintext.
func checkAgent(t *testing.T, r *rendered, n objectNames, tlsSecret string, lvmReject []string) {
	t.Helper()
	checkAgentDaemonSet(t, r, n, n.agent, tlsSecret, lvmReject)
}

// checkAgentDaemonSet asserts the agent DaemonSet named ds.
func checkAgentDaemonSet(t *testing.T, r *rendered, n objectNames, name, tlsSecret string, lvmReject []string) {
	t.Helper()
	ds := get[appsv1.DaemonSet](t, r, "DaemonSet", name)
	pod := ds.Spec.Template.Spec
	checkHostPod(t, "agent", pod, n.agent, r)
	if len(pod.NodeSelector) == 0 {
		t.Error("agent DaemonSet runs on every node")
	}
	if r.namespace == "pillar-csi" { // the cases that keep the default selector
		if diff := cmp.Diff(map[string]string{"pillar-csi.io/storage-node": "true"}, pod.NodeSelector); diff != "" {
			t.Errorf("agent nodeSelector (-want +got):\n%s", diff)
		}
	}
	wantHostPath(t, pod, "host-root", "/", corev1.HostPathDirectory)
	wantHostPath(t, pod, "dev", "/dev", corev1.HostPathDirectory)
	wantHostPath(t, pod, "configfs", "/sys/kernel/config", corev1.HostPathDirectory)
	wantHostPath(t, pod, "lib-modules", "/lib/modules", corev1.HostPathDirectory)
	wantHostPath(t, pod, "generations", "/var/lib/pillar-csi/agent/generations", corev1.HostPathDirectoryOrCreate)

	if got := containerNames(pod.InitContainers); !slices.Equal(got, []string{"modprobe"}) {
		t.Errorf("agent init containers %v", got)
	}
	mp := container(t, pod.InitContainers, "modprobe")
	if diff := cmp.Diff([]string{"/sbin/modprobe", "-a", "nvmet", "nvmet_tcp"}, mp.Command); diff != "" {
		t.Errorf("agent modprobe command (-want +got):\n%s", diff)
	}
	if m := mountAt(t, mp, "lib-modules", "/lib/modules"); m != nil && !m.ReadOnly {
		t.Error("agent modprobe mounts /lib/modules read-write")
	}
	wantOnlyCaps(t, mp, "SYS_MODULE")

	c := container(t, pod.Containers, "pillar-agent")
	wantImage(t, mp, c.Image)
	// The node's own address, not every address it has; every call
	// must carry a token of the mounted Secret.
	for _, a := range []string{"-node-name=$(NODE_NAME)", "-listen-address=[$(HOST_IP)]:9420", "-metrics-address=[$(HOST_IP)]:9421",
		"-generations-dir=/var/lib/pillar-csi/agent/generations", "-configfs-root=/sys/kernel/config", "-host-root=/host",
		"-token-dir=/etc/pillar-csi/agent-token", "-shutdown-grace-period=180s"} {
		wantArg(t, c.Name, c.Args, a)
	}
	// The calls in flight finish before SIGKILL: the agent's grace covers
	// its longest command (2 minutes), the pod's covers the agent's.
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 210 {
		t.Errorf("agent terminationGracePeriodSeconds %v, want 210 (the 180 s shutdown grace and 30 s to close)", g)
	}
	wantEnvFieldRef(t, c, "HOST_IP", "status.hostIP")
	wantTokenMount(t, r, n, pod, c)
	var reject []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "-lvm-reject="); ok {
			reject = append(reject, v)
		}
	}
	if diff := cmp.Diff(lvmReject, reject); diff != "" {
		t.Errorf("-lvm-reject flags (-want +got):\n%s", diff)
	}
	wantEnvFieldRef(t, c, "NODE_NAME", "spec.nodeName")
	wantPrivileged(t, c)
	if m := mountAt(t, c, "host-root", "/host"); m != nil {
		if m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
			t.Errorf("/host: readOnly %v, propagation %s; want read-write, HostToContainer", m.ReadOnly, deref(m.MountPropagation))
		}
	}
	mountAt(t, c, "dev", "/dev")
	mountAt(t, c, "configfs", "/sys/kernel/config")
	mountAt(t, c, "generations", "/var/lib/pillar-csi/agent/generations")
	wantPort(t, c, "grpc", 9420)
	wantPort(t, c, "metrics", 9421)
	wantHTTPProbe(t, c.Name, "liveness", c.LivenessProbe, "/healthz", "metrics")
	wantHTTPProbe(t, c.Name, "readiness", c.ReadinessProbe, "/readyz", "metrics")

	tlsArgs := []string{"-tls-cert-file=/etc/pillar-csi/tls/tls.crt", "-tls-key-file=/etc/pillar-csi/tls/tls.key", "-tls-ca-file=/etc/pillar-csi/tls/ca.crt"}
	if tlsSecret == "" {
		for _, a := range c.Args {
			if strings.HasPrefix(a, "-tls-") {
				t.Errorf("plaintext agent has %s", a)
			}
		}
		if slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "tls" }) {
			t.Error("plaintext agent mounts a tls volume")
		}
		return
	}
	for _, a := range append(tlsArgs, "-tls-client-name=pillar-controller") {
		wantArg(t, c.Name, c.Args, a)
	}
	v := volume(t, pod.Volumes, "tls")
	if v.Secret == nil || v.Secret.SecretName != tlsSecret {
		t.Errorf("tls volume %+v, want Secret %s", v.VolumeSource, tlsSecret)
	}
	if m := mountAt(t, c, "tls", "/etc/pillar-csi/tls"); m != nil && (m.SubPath != "" || !m.ReadOnly) {
		t.Errorf("tls mount %+v: a subPath would never see a renewed certificate", m)
	}
}

// wantTokenMount asserts that c mounts the installation's agent-token
// Secret as a volume (never a subPath, which would not see a rotation), and
// that the chart renders that Secret with a token fit for agentauth.
func wantTokenMount(t *testing.T, r *rendered, n objectNames, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	wantTokenSecret(t, pod, c, n.fullname+"-agent-token")
	s := get[corev1.Secret](t, r, "Secret", n.fullname+"-agent-token")
	if tok := s.Data[agentauth.ClientKey]; len(tok) < agentauth.MinLength {
		t.Errorf("Secret %s: token of %d bytes, want at least %d", s.Name, len(tok), agentauth.MinLength)
	}
}

// wantTokenSecret asserts that c mounts Secret secret at the agent-token
// path.
func wantTokenSecret(t *testing.T, pod corev1.PodSpec, c corev1.Container, secret string) {
	t.Helper()
	v := volume(t, pod.Volumes, "agent-token")
	if v.Secret == nil || v.Secret.SecretName != secret {
		t.Errorf("%s: agent-token volume %+v, want Secret %s", c.Name, v.VolumeSource, secret)
	}
	if m := mountAt(t, c, "agent-token", "/etc/pillar-csi/agent-token"); m != nil && (m.SubPath != "" || !m.ReadOnly) {
		t.Errorf("%s: agent-token mount %+v: want read-only, no subPath", c.Name, m)
	}
}

// checkHostPod asserts what agent and node pods share: host network, no
// API token, the node-critical priority.
func checkHostPod(t *testing.T, what string, pod corev1.PodSpec, sa string, r *rendered) {
	t.Helper()
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("%s: hostNetwork %v, dnsPolicy %q", what, pod.HostNetwork, pod.DNSPolicy)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s pod mounts an API token", what)
	}
	if pod.ServiceAccountName != sa {
		t.Errorf("%s: serviceAccountName %q, want %q", what, pod.ServiceAccountName, sa)
	}
	acct := get[corev1.ServiceAccount](t, r, "ServiceAccount", sa)
	if acct.AutomountServiceAccountToken == nil || *acct.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount %s mounts its token", sa)
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("%s: priorityClassName %q", what, pod.PriorityClassName)
	}
}

// checkPillarAgents asserts the PillarAgents of the storage nodes named
// in only (default: those of storageNodes); secret is
// the controller's client Secret, or "" for plaintext.
func checkPillarAgents(t *testing.T, r *rendered, secret, namespace string, only ...string) {
	t.Helper()
	var tls = func(serverName string) *v1alpha1.AgentTLS {
		if secret == "" {
			return nil
		}
		return &v1alpha1.AgentTLS{SecretRef: v1alpha1.SecretReference{Name: v1alpha1.ObjectName(secret), Namespace: v1alpha1.ObjectName(namespace)}, ServerName: serverName}
	}
	want := map[string]v1alpha1.PillarAgentSpec{
		// Dialled at the Node's InternalIP, which no certificate names.
		"storage-1": {NodeName: "storage-1", Port: 9420, TLS: tls("storage-1")},
		"storage-2": {NodeName: "storage-2", Address: "192.0.2.20", Port: 9420, TLS: tls("")},
		"storage-3": {Address: "storage-3.example.net", Port: 9500, TLS: tls("")},
		"storage-4": {NodeName: "storage-4", Address: "storage-4.example.net", Port: 9420, TLS: tls("agent-4.example.net")},
	}
	if len(only) == 0 {
		only = []string{"storage-1", "storage-2", "storage-3"} // storageNodes
	}
	maps.DeleteFunc(want, func(name string, _ v1alpha1.PillarAgentSpec) bool { return !slices.Contains(only, name) })
	got := map[string]v1alpha1.PillarAgentSpec{}
	for _, o := range r.find("PillarAgent") {
		a := get[v1alpha1.PillarAgent](t, r, "PillarAgent", o.GetName())
		if a.APIVersion != "pillar-csi.io/v1alpha1" || a.Namespace != "" {
			t.Errorf("PillarAgent %s: apiVersion %q, namespace %q", a.Name, a.APIVersion, a.Namespace)
		}
		// helm uninstall and a storageNodes edit leave it to its volumes.
		if p := a.Annotations["helm.sh/resource-policy"]; p != "keep" {
			t.Errorf("PillarAgent %s: helm.sh/resource-policy %q, want keep", a.Name, p)
		}
		got[a.Name] = a.Spec
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PillarAgents (-want +got):\n%s", diff)
	}
}

func checkCertManager(t *testing.T, r *rendered) {
	t.Helper()
	type cert struct {
		Spec struct {
			IsCA        bool     `json:"isCA"`
			CommonName  string   `json:"commonName"`
			SecretName  string   `json:"secretName"`
			DNSNames    []string `json:"dnsNames"`
			IPAddresses []string `json:"ipAddresses"`
			Usages      []string `json:"usages"`
			IssuerRef   struct{ Kind, Name string }
		} `json:"spec"`
	}
	loose := func(name string) cert {
		for _, o := range r.find("Certificate") {
			if o.GetName() == name {
				var c cert
				if err := convertLoose(o, &c); err != nil {
					t.Fatal(err)
				}
				return c
			}
		}
		t.Fatalf("no Certificate %s", name)
		return cert{}
	}
	for _, name := range []string{"pillar-csi-selfsigned", "pillar-csi-ca"} {
		if !r.has("Issuer", name) {
			t.Errorf("no Issuer %s", name)
		}
	}
	ca := loose("pillar-csi-ca")
	if !ca.Spec.IsCA || ca.Spec.IssuerRef.Name != "pillar-csi-selfsigned" || ca.Spec.SecretName != "pillar-csi-ca" {
		t.Errorf("CA Certificate %+v", ca.Spec)
	}
	if r.has("Certificate", "pillar-csi-agent-tls") {
		t.Error("Certificate pillar-csi-agent-tls rendered: every storage node has its own")
	}
	for node, names := range certManagerNames {
		agent := loose("pillar-csi-agent-tls-" + node)
		if agent.Spec.SecretName != "pillar-csi-agent-tls-"+node || agent.Spec.IssuerRef.Name != "pillar-csi-ca" ||
			!slices.Equal(agent.Spec.Usages, []string{"server auth", "digital signature"}) || agent.Spec.CommonName != node {
			t.Errorf("%s's Certificate %+v", node, agent.Spec)
		}
		// Its own names and no other node's.
		if diff := cmp.Diff(names[0], agent.Spec.DNSNames); diff != "" {
			t.Errorf("%s's certificate DNS names (-want +got):\n%s", node, diff)
		}
		if diff := cmp.Diff(names[1], agent.Spec.IPAddresses); diff != "" {
			t.Errorf("%s's certificate IP addresses (-want +got):\n%s", node, diff)
		}
	}
	client := loose("pillar-csi-controller-client-tls")
	if client.Spec.SecretName != "pillar-csi-controller-client-tls" || client.Spec.IssuerRef.Name != "pillar-csi-ca" || !slices.Contains(client.Spec.Usages, "client auth") {
		t.Errorf("controller Certificate %+v", client.Spec)
	}
	// The agents require the client name (tls.clientName) the
	// controller's certificate carries.
	if client.Spec.CommonName != "pillar-controller" || !slices.Equal(client.Spec.DNSNames, []string{"pillar-controller"}) {
		t.Errorf("controller certificate: common name %q, DNS names %v; want pillar-controller", client.Spec.CommonName, client.Spec.DNSNames)
	}
}

// ---- small assertions ----

func ptr[T any](v T) *T { return &v }

func deref(p *corev1.MountPropagationMode) string {
	if p == nil {
		return "<unset>"
	}
	return string(*p)
}

// convertLoose decodes o into v, ignoring fields v does not have (for
// objects whose Go types this module does not import).
func convertLoose(o *unstructured.Unstructured, v any) error {
	data, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func containerNames(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s in %v", name, containerNames(cs))
	return corev1.Container{}
}

func volume(t *testing.T, vs []corev1.Volume, name string) corev1.Volume {
	t.Helper()
	for _, v := range vs {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

func wantHostPath(t *testing.T, pod corev1.PodSpec, name, path string, typ corev1.HostPathType) {
	t.Helper()
	v := volume(t, pod.Volumes, name)
	if v.HostPath == nil || v.HostPath.Path != path || v.HostPath.Type == nil || *v.HostPath.Type != typ {
		t.Errorf("volume %s: %+v, want hostPath %s (%s)", name, v.HostPath, path, typ)
	}
}

// mountAt asserts that c mounts volume at path and returns the mount.
func mountAt(t *testing.T, c corev1.Container, volume, path string) *corev1.VolumeMount {
	t.Helper()
	for i, m := range c.VolumeMounts {
		if m.Name == volume {
			if m.MountPath != path {
				t.Errorf("%s: volume %s mounted at %s, want %s", c.Name, volume, m.MountPath, path)
			}
			return &c.VolumeMounts[i]
		}
	}
	t.Errorf("%s does not mount %s", c.Name, volume)
	return nil
}

func wantArg(t *testing.T, who string, args []string, want string) {
	t.Helper()
	if !slices.Contains(args, want) {
		t.Errorf("%s: no %s in %q", who, want, args)
	}
}

func wantImage(t *testing.T, c corev1.Container, image string) {
	t.Helper()
	if c.Image != image {
		t.Errorf("%s: image %q, want %q", c.Name, c.Image, image)
	}
}

func wantPrivileged(t *testing.T, c corev1.Container) {
	t.Helper()
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("%s is not privileged", c.Name)
	}
}

// wantOnlyCaps asserts that c is not privileged, cannot gain privileges,
// has a read-only root filesystem and exactly the capabilities caps.
func wantOnlyCaps(t *testing.T, c corev1.Container, caps ...corev1.Capability) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil {
		t.Errorf("%s: securityContext %+v, want not privileged, no privilege escalation, a read-only root", c.Name, sc)
		return
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, caps) {
		t.Errorf("%s: capabilities %+v, want ALL dropped and %v added", c.Name, sc.Capabilities, caps)
	}
}

func wantEnvFieldRef(t *testing.T, c corev1.Container, name, field string) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
				t.Errorf("%s: env %s = %+v, want fieldRef %s", c.Name, name, e, field)
			}
			return
		}
	}
	t.Errorf("%s: no env %s", c.Name, name)
}

func wantPort(t *testing.T, c corev1.Container, name string, port int32) {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			if p.ContainerPort != port {
				t.Errorf("%s: port %s = %d, want %d", c.Name, name, p.ContainerPort, port)
			}
			return
		}
	}
	t.Errorf("%s: no port %s", c.Name, name)
}

func wantHTTPProbe(t *testing.T, who, kind string, p *corev1.Probe, path, port string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP %s probe", who, kind)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != port {
		t.Errorf("%s: %s probe GET %s on %s, want %s on %s", who, kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
	}
}

// snapshotsServed is what helm install finds where the cluster has the
// snapshot CRDs.
const snapshotsServed = "snapshot.storage.k8s.io/v1/VolumeSnapshotClass"

// checkSnapshots asserts the snapshot parts of a case where the cluster
// serves the snapshot API and the chart runs the snapshot controller: the
// driver's VolumeSnapshotClass, csi-snapshotter's role (contents and
// classes only, no VolumeSnapshots, no Secrets) bound to the controller's
// ServiceAccount, and the snapshot controller in a pod of its own.
func checkSnapshots(t *testing.T, r *rendered, n objectNames, deletionPolicy string, isDefault bool) {
	t.Helper()
	vsc := r.find("VolumeSnapshotClass")
	if len(vsc) != 1 {
		t.Fatalf("%d VolumeSnapshotClasses, want 1", len(vsc))
	}
	if d, p := vsc[0].Object["driver"], vsc[0].Object["deletionPolicy"]; d != "pillar-csi.io" || p != deletionPolicy {
		t.Errorf("VolumeSnapshotClass driver %v, deletionPolicy %v; want pillar-csi.io, %s", d, p, deletionPolicy)
	}
	if got := vsc[0].GetAnnotations()["snapshot.storage.kubernetes.io/is-default-class"] == "true"; got != isDefault {
		t.Errorf("VolumeSnapshotClass is the default: %v, want %v", got, isDefault)
	}
	sn := get[rbacv1.ClusterRole](t, r, "ClusterRole", n.fullname+"-snapshotter")
	if !grants(sn.Rules, "snapshot.storage.k8s.io", "volumesnapshotcontents/status", "patch") || !grants(sn.Rules, "snapshot.storage.k8s.io", "volumesnapshotclasses", "watch") {
		t.Errorf("csi-snapshotter cannot patch content status or watch classes: %+v", sn.Rules)
	}
	if grants(sn.Rules, "snapshot.storage.k8s.io", "volumesnapshots", "get") || grants(sn.Rules, "snapshot.storage.k8s.io", "volumesnapshotcontents", "delete") {
		t.Errorf("csi-snapshotter may read VolumeSnapshots or delete contents, which only the snapshot controller does: %+v", sn.Rules)
	}
	prov := get[rbacv1.ClusterRole](t, r, "ClusterRole", n.fullname+"-provisioner")
	if !grants(prov.Rules, "snapshot.storage.k8s.io", "volumesnapshots", "update") || !grants(prov.Rules, "snapshot.storage.k8s.io", "volumesnapshotcontents", "get") {
		t.Errorf("the provisioner cannot restore from a VolumeSnapshot (read it and its content, keep its finalizer): %+v", prov.Rules)
	}
	name := n.fullname + "-snapshot-controller"
	d := get[appsv1.Deployment](t, r, "Deployment", name)
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != name || pod.HostNetwork {
		t.Errorf("snapshot controller: serviceAccountName %q, hostNetwork %v", pod.ServiceAccountName, pod.HostNetwork)
	}
	c := container(t, pod.Containers, "snapshot-controller")
	wantImage(t, c, "registry.k8s.io/sig-storage/snapshot-controller:v8.7.0")
	wantArg(t, c.Name, c.Args, "--leader-election")
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("snapshot controller securityContext %+v", sc)
	}
	cr := get[rbacv1.ClusterRole](t, r, "ClusterRole", name)
	if !grants(cr.Rules, "snapshot.storage.k8s.io", "volumesnapshotcontents", "create") || grants(cr.Rules, "", "secrets", "get") {
		t.Errorf("snapshot controller rules %+v", cr.Rules)
	}
	crb := get[rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", name)
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: r.namespace}}; !slices.Equal(crb.Subjects, want) {
		t.Errorf("snapshot controller binding subjects %+v", crb.Subjects)
	}
}
