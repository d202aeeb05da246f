// Package envtestsuite starts what pillar-controller's API-server tests and
// benchmarks run against: a real kube-apiserver and etcd (envtest, from
// $KUBEBUILDER_ASSETS, or the kube-apiserver binary $PILLAR_TEST_KUBE_APISERVER
// names), the Pillar* CRDs, and a user bound only to the generated RBAC of
// config/rbac, so a missing verb fails.
package envtestsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// Names the RBAC of config/rbac is bound to.
const (
	Namespace      = "pillar-csi"
	ControllerUser = "system:serviceaccount:pillar-csi:pillar-controller"
)

// Cluster is a started API server.
type Cluster struct {
	Scheme *runtime.Scheme
	// Admin is a client with every permission (the test's own).
	Admin       client.Client
	AdminConfig *rest.Config
	// User is the controller's identity: the generated RBAC only.
	User *rest.Config
	// Kubeconfig is a kubeconfig file of User, for the binary.
	Kubeconfig string
	// Version is the server's version (v1.37.2) and Minor its minor
	// number.
	Version string
	Minor   int

	env *envtest.Environment
	dir string
}

// Start starts the API server. crdDir and rbacFile are paths to
// api/config/crd and csidriver/config/rbac/role.yaml.
func Start(crdDir, rbacFile string) (*Cluster, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("the API-server suite needs kube-apiserver and etcd in $KUBEBUILDER_ASSETS (%q): %w; "+
				"run `make tools` at the repository root (`make test` sets KUBEBUILDER_ASSETS)", assets, err)
		}
	}
	c := &Cluster{Scheme: runtime.NewScheme()}
	if err := clientgoscheme.AddToScheme(c.Scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(c.Scheme); err != nil {
		return nil, err
	}
	c.env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{crdDir},
		ErrorIfCRDPathMissing: true,
		Scheme:                c.Scheme,
	}
	if p := os.Getenv("PILLAR_TEST_KUBE_APISERVER"); p != "" {
		c.env.ControlPlane.GetAPIServer().Path = p
	}
	cfg, err := c.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	if err := c.setup(cfg, rbacFile); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) setup(cfg *rest.Config, rbacFile string) error {
	cfg.WarningHandler = rest.NoWarnings{}
	c.AdminConfig = cfg
	var err error
	if c.Admin, err = client.New(cfg, client.Options{Scheme: c.Scheme}); err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("server version: %w", err)
	}
	c.Version = v.GitVersion
	if _, err := fmt.Sscan(v.Minor, &c.Minor); err != nil {
		return fmt.Errorf("server minor version %q: %w", v.Minor, err)
	}
	if err := c.installRBAC(context.Background(), rbacFile); err != nil {
		return fmt.Errorf("RBAC: %w", err)
	}
	user, err := c.env.AddUser(envtest.User{Name: ControllerUser}, cfg)
	if err != nil {
		return err
	}
	c.User = user.Config()
	c.User.WarningHandler = rest.NoWarnings{}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if c.dir, err = os.MkdirTemp("", "pillar-envtest"); err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	return os.WriteFile(c.Kubeconfig, kc, 0o600)
}

// Stop stops the API server and etcd.
func (c *Cluster) Stop() {
	_ = c.env.Stop()
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// installRBAC installs the ClusterRole and the Role (in Namespace) of
// rbacFile and binds both to ControllerUser.
func (c *Cluster) installRBAC(ctx context.Context, rbacFile string) error {
	if err := c.Admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		return err
	}
	raw, err := os.ReadFile(rbacFile)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: ControllerUser}}
	for {
		var u map[string]any
		if err := dec.Decode(&u); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if u == nil {
			continue
		}
		switch u["kind"] {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &r); err != nil {
				return err
			}
			if err := c.Admin.Create(ctx, &r); err != nil {
				return err
			}
			if err := c.Admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name}}); err != nil {
				return err
			}
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &r); err != nil {
				return err
			}
			if r.Namespace != Namespace {
				return fmt.Errorf("role %s is in namespace %q, want %q", r.Name, r.Namespace, Namespace)
			}
			if err := c.Admin.Create(ctx, &r); err != nil {
				return err
			}
			if err := c.Admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: Namespace}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected kind %v in %s", u["kind"], rbacFile)
		}
	}
}
