package kernelvm

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// KubeconfigEnv names the variable that gives a guest's tests the
// kubeconfig of the API server the host runs for them (APIServer).
const KubeconfigEnv = "PILLAR_LAB_KUBECONFIG"

// APIServer is etcd and kube-apiserver running on the host for the tests
// in a guest. In the guest both are emulated and slow (their start alone
// took 55 s of a 423 s package), and they take the guest's CPU from the
// binaries under test; on the host they run natively, and the guest
// reaches them at HostAddr through QEMU's user-mode network.
type APIServer struct {
	env *envtest.Environment
	// Dir holds Kubeconfig; Remove it after Stop.
	Dir string
	// Kubeconfig is the path of a kubeconfig for a cluster administrator
	// (system:masters) that names the server by HostAddr, for the guest.
	Kubeconfig string
}

// APIServerOptions says which binaries and CRDs the API server uses.
type APIServerOptions struct {
	// Bin holds etcd and kube-apiserver.
	Bin string
	// CRDDir holds the CRDs to install; the start waits until they are
	// served.
	CRDDir string
	// Dir is where the kubeconfig is written: a directory the guest can
	// read (TestOptions.Expose it when the guest's /tmp hides it).
	Dir string
	// Log receives etcd's and kube-apiserver's output.
	Log io.Writer
	// StartTimeout bounds the start (one minute if zero).
	StartTimeout time.Duration
}

// StartAPIServer starts etcd and kube-apiserver on the host's loopback,
// installs the CRDs and writes APIServer.Kubeconfig.
func StartAPIServer(o APIServerOptions) (*APIServer, error) {
	const op = "start the host's API server"
	if o.StartTimeout == 0 {
		o.StartTimeout = time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(o.Bin, b)); err != nil {
			return nil, &Error{Op: op, Path: o.Bin, Err: fmt.Errorf("%s is missing (`make test-kernel` builds it): %w", b, err)}
		}
	}
	// envtest logs through controller-runtime's logger.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(o.Log, nil)))
	env := &envtest.Environment{
		BinaryAssetsDirectory:    o.Bin,
		CRDDirectoryPaths:        []string{o.CRDDir},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: o.StartTimeout,
		ControlPlaneStopTimeout:  o.StartTimeout,
		CRDInstallOptions:        envtest.CRDInstallOptions{MaxTime: o.StartTimeout},
	}
	api := env.ControlPlane.GetAPIServer()
	api.Out, api.Err = o.Log, o.Log
	env.ControlPlane.Etcd = &envtest.Etcd{Out: o.Log, Err: o.Log}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, &Error{Op: op, Path: o.Bin, Err: err}
	}
	a := &APIServer{env: env, Dir: o.Dir, Kubeconfig: filepath.Join(o.Dir, "kubeconfig")}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		a.Stop()
		return nil, &Error{Op: op, Err: err}
	}
	// The guest dials HostAddr; the serving certificate names localhost
	// and 127.0.0.1, the host's side of that forward.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{
		Server:                   "https://" + HostAddr + ":" + u.Port(),
		CertificateAuthorityData: cfg.CAData,
		TLSServerName:            "localhost",
	}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "admin"}
	kc.CurrentContext = "lab"
	if err := clientcmd.WriteToFile(*kc, a.Kubeconfig); err != nil {
		a.Stop()
		return nil, &Error{Op: op, Path: a.Kubeconfig, Err: err}
	}
	return a, nil
}

// Stop stops kube-apiserver and etcd and removes their data.
func (a *APIServer) Stop() {
	_ = a.env.Stop()
	os.Remove(a.Kubeconfig)
}
