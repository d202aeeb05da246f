// Command cert-manager-controller runs cert-manager's own controllers, at
// the release tests/tools/certmanager pins, for the lab cluster's
// TestCertManagerMutualTLS: the issuers, the CertificateRequest approver
// and signers of the CA and selfSigned issuers, and every Certificate
// controller (trigger, key manager, request manager, issuing, readiness,
// revision manager). The controllers and their shared informers are
// cert-manager's code from the Go module proxy; this file only wires
// them, as upstream's cmd/controller does.
//
// Upstream's main is the module github.com/cert-manager/cert-manager/
// controller-binary, which lives in the directory cmd/controller of
// cert-manager's repository: a module path that does not match its
// directory cannot be fetched through the Go module proxy, and the
// cert-manager module's zip leaves nested modules out. Its packages under
// pkg/controller, which register themselves with pkg/controller, are in
// the zip.
//
// What it leaves out, and why that is enough for the chart's
// cert-manager mode: ACME, Vault, Venafi, ingress and Gateway shims
// (the chart uses a selfSigned and a CA issuer), leader election (one
// process runs), the metrics and health endpoints, and cert-manager's
// webhook, which only validates and defaults objects that users create
// and converts between API versions; the CRDs of this release serve only
// cert-manager.io/v1, and the controllers do not need it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// The controllers register themselves with pkg/controller, the issuer
	// types with pkg/issuer.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the controllers run, by the names they register with.
var controllers = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-ca",
	"certificaterequests-issuer-selfsigned",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
	"certificates-revision-manager",
}

// config is what the flags set.
type config struct {
	kubeconfig string
	namespace  string
	workers    int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster (required)")
	flag.StringVar(&cfg.namespace, "namespace", "", "the only namespace whose Issuers and Certificates are served (empty: all)")
	flag.IntVar(&cfg.workers, "workers", 2, "workers of each controller")
	klog.InitFlags(nil) // -v and the other klog flags
	flag.Parse()
	if cfg.kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "cert-manager-controller: -kubeconfig is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg)
	stop()
	klog.Flush()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager-controller: %v\n", err)
		os.Exit(1)
	}
}

// run starts the controllers and their informers and returns when ctx
// ends or a controller fails.
func run(ctx context.Context, cfg config) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	// The defaults of cert-manager's controller configuration
	// (internal/apis/config/controller/v1alpha1), which its command sets
	// from its flags.
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         cfg.kubeconfig,
		Namespace:          cfg.namespace,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: "kube-system"},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return fmt.Errorf("controller context: %w", err)
	}
	known := controllerpkg.Known()
	ifaces := make(map[string]controllerpkg.Interface, len(controllers))
	for _, name := range controllers {
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %s is not registered: the pinned cert-manager renamed or moved it", name)
		}
		iface, err := construct(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		ifaces[name] = iface
	}
	// The informers the constructors asked for are started once every
	// controller has registered its own; each controller's Run waits for
	// their caches.
	shared, err := factory.Build()
	if err != nil {
		return fmt.Errorf("controller context: %w", err)
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	for name, iface := range ifaces {
		wg.Go(func() {
			klog.InfoS("starting controller", "controller", name)
			if err := iface.Run(cfg.workers, ctx); err != nil {
				cancel(fmt.Errorf("controller %s: %w", name, err))
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	shared.SharedInformerFactory.Shutdown()
	shared.KubeSharedInformerFactory.Shutdown()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
