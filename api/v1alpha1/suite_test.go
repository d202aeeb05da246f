package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// The tests of this package run against a real kube-apiserver and etcd
// started once for the package by envtest, with the CRDs of config/crd
// installed: the schema's OpenAPI and CEL rules are enforced by the API
// server itself, not by a fake.
var (
	cfg    *rest.Config
	k8s    client.Client
	scheme = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if err := checkAssets(assets); err != nil {
		// Fail, never skip: a suite that silently does not run proves
		// nothing.
		fmt.Fprintf(os.Stderr, "FAIL: the API-server suite needs kube-apiserver and etcd: %v\n"+
			"Run `make tools` at the repository root and set KUBEBUILDER_ASSETS to its bin/ directory "+
			"(the Makefile's `make test` does both).\n", err)
		return 1
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	var err error
	cfg, err = env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting kube-apiserver and etcd from %s: %v\n", assets, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	// Warnings (such as unknown fields) would otherwise only be logged.
	cfg.WarningHandler = rest.NoWarnings{}
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: client: %v\n", err)
		return 1
	}
	return m.Run()
}

func checkAssets(dir string) error {
	if dir == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		p := filepath.Join(dir, bin)
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("KUBEBUILDER_ASSETS=%s: %w", dir, err)
		}
		if st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", p)
		}
	}
	return nil
}

// strict rejects unknown fields instead of dropping them with a warning, so
// a misspelled field in a test or a sample fails loudly.
var strict = client.FieldValidation("Strict")

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
