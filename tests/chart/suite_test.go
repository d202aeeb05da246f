package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// The suite's cluster and the tools, set up once by TestMain.
var (
	repoRoot    string
	chartDir    string
	helm        string
	kubeVersion string // of the envtest kube-apiserver, passed to helm template
	k8s         client.Client
	// restConfig is the cluster administrator's (system:masters) that k8s
	// uses, for clients of other schemes or that impersonate a user.
	restConfig *rest.Config
	// kubeconfig is a cluster administrator's, for helm install.
	kubeconfig string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	fail := func(format string, args ...any) int {
		// Fail, never skip: a suite that silently does not run proves
		// nothing.
		fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
		return 1
	}
	var err error
	if repoRoot, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
		return fail("%v", err)
	}
	chartDir = filepath.Join(repoRoot, "deploy", "charts", "pillar-csi")
	helm = filepath.Join(repoRoot, "bin", "helm")
	if err := executable(helm); err != nil {
		return fail("the chart suite needs helm: %v; run `make tools` at the repository root", err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return fail("KUBEBUILDER_ASSETS is not set: the chart suite needs kube-apiserver and etcd; " +
			"run `make tools` and set it to the repository's bin/ (`make test` and `make chart-test` do both)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if err := executable(filepath.Join(assets, bin)); err != nil {
			return fail("KUBEBUILDER_ASSETS=%s: %v; run `make tools`", assets, err)
		}
	}
	certManagerCRDs, err := moduleCRDDir("certmanager", "github.com/cert-manager/cert-manager", "deploy/crds", "cert-manager.io_certificates.yaml")
	if err != nil {
		return fail("%v", err)
	}
	snapshotCRDs, err := moduleCRDDir("sidecars/snapshotter", "github.com/kubernetes-csi/external-snapshotter/client/v8", "config/crd",
		"snapshot.storage.k8s.io_volumesnapshotclasses.yaml")
	if err != nil {
		return fail("%v", err)
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(chartDir, "crds"), certManagerCRDs, snapshotCRDs},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return fail("starting kube-apiserver and etcd from %s: %v", assets, err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	// Warnings (unknown fields, deprecated APIs) fail the apply instead
	// of being logged.
	cfg.WarningHandler = rest.NoWarnings{}
	restConfig = cfg
	if k8s, err = client.New(cfg, client.Options{}); err != nil {
		return fail("client: %v", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fail("discovery: %v", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return fail("server version: %v", err)
	}
	kubeVersion = v.GitVersion
	admin, err := env.AddUser(envtest.User{Name: "chart-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fail("admin user: %v", err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		return fail("admin kubeconfig: %v", err)
	}
	dir, err := os.MkdirTemp("", "pillar-chart-test")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return fail("%v", err)
	}
	return m.Run()
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// moduleCRDDir finds the CRDs a module of the Go module proxy ships, in
// the module cache (downloading it, verified against go.sum, if it is not
// there yet): module at the version tests/tools/<tool>/go.mod pins, its
// directory subdir, which must hold probe. The suite's API server serves
// cert-manager's CRDs (tests/tools/certmanager) and the snapshot CRDs
// (tests/tools/sidecars/snapshotter), as a cluster with them does.
func moduleCRDDir(tool, module, subdir, probe string) (string, error) {
	root, version, err := moduleDir(tool, module)
	if err != nil {
		return "", fmt.Errorf("locating the CRDs: %w", err)
	}
	dir := filepath.Join(root, filepath.FromSlash(subdir))
	if _, err := os.Stat(filepath.Join(dir, probe)); err != nil {
		return "", fmt.Errorf("%s %s: no CRDs where expected: %w", module, version, err)
	}
	return dir, nil
}

// moduleDir returns the directory in the module cache of module at the
// version the module tests/tools/<tool> builds with (downloading it,
// verified against go.sum, if it is not there yet), and that version.
func moduleDir(tool, module string) (dir, version string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = filepath.Join(repoRoot, "tests", "tools", filepath.FromSlash(tool))
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download %s in %s: %w: %s", module, cmd.Dir, err, stderr.String())
	}
	var mod struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", "", fmt.Errorf("go mod download -json: %w", err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s: %q", module, mod.Error)
	}
	return mod.Dir, mod.Version, nil
}

// helmRun runs bin/helm and returns its stdout; the error carries stderr.
func helmRun(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	return helmStdin(t, nil, args...)
}

func helmStdin(t *testing.T, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	return helmCommand(ctx, stdin, args...)
}

// helmCommand runs bin/helm under ctx; a test's cleanup calls it with a
// context of its own, t.Context() being cancelled by then.
func helmCommand(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, helm, args...)
	// Keep helm away from the user's repositories, plugins and caches.
	home, err := os.MkdirTemp("", "pillar-chart-helm")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// release says what to render: release name, namespace and values, and
// what helm template is to take the cluster for.
type release struct {
	name, namespace string
	values          map[string]any
	// kubeVersion is --kube-version; empty means the suite's API server's.
	kubeVersion string
	// apiVersions are passed as --api-versions: helm template's
	// Capabilities.APIVersions holds group/version pairs of its own
	// scheme but no kinds, which helm install reads from the cluster's
	// discovery ("group/version/Kind").
	apiVersions []string
}

// template renders the chart for r with helm template.
func template(t *testing.T, r release) ([]byte, error) {
	t.Helper()
	kv := kubeVersion
	if r.kubeVersion != "" {
		kv = r.kubeVersion
	}
	args := []string{"template", r.name, chartDir, "--namespace", r.namespace, "--kube-version", kv}
	for _, v := range r.apiVersions {
		args = append(args, "--api-versions", v)
	}
	var values []byte
	if r.values != nil {
		// On stdin: helm splits a --values path at commas.
		var err error
		if values, err = yaml.Marshal(r.values); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", "-")
	}
	return helmStdin(t, values, args...)
}

// rendered is what one helm template produced.
type rendered struct {
	namespace string
	objects   []*unstructured.Unstructured
}

func render(t *testing.T, r release) *rendered {
	t.Helper()
	out, err := template(t, r)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatalf("decoding helm template output: %v\n%s", err, out)
	}
	return &rendered{namespace: r.namespace, objects: objs}
}

func decodeAll(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// find returns the rendered objects of a kind.
func (r *rendered) find(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// get decodes the rendered object of a kind and name into a typed object,
// refusing fields the type does not have (a misspelled field in a template
// would otherwise vanish).
func get[T any](t *testing.T, r *rendered, kind, name string) *T {
	t.Helper()
	for _, o := range r.find(kind) {
		if o.GetName() != name {
			continue
		}
		var v T
		if err := strictConvert(o, &v); err != nil {
			t.Fatalf("%s %s: %v", kind, name, err)
		}
		return &v
	}
	var names []string
	for _, o := range r.find(kind) {
		names = append(names, o.GetName())
	}
	t.Fatalf("no %s %q rendered (have %v)", kind, name, names)
	return nil
}

func strictConvert(o *unstructured.Unstructured, v any) error {
	data, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// has reports whether any object of kind is rendered under name.
func (r *rendered) has(kind, name string) bool {
	for _, o := range r.find(kind) {
		if o.GetName() == name {
			return true
		}
	}
	return false
}

// ensureNamespace creates ns for real: namespaced objects cannot even be
// dry-run into a namespace that does not exist.
func ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	err := k8s.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
