package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// Options say where the cluster's binaries and images are.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet, kube-proxy, kubectl and helm (the
	// repository's bin/, filled by make cluster-tools). It must be outside
	// /tmp, which the guest hides.
	BinDir string
	// ImageDir holds the image tarballs of make images; every *.tar is
	// imported, or those Images names (file names without .tar).
	// pause.tar, when present, is the pod sandbox image; otherwise the
	// harness builds one from busybox.
	ImageDir string
	Images   []string
	// StateDir holds the PKI, the configuration files, etcd's data and
	// the components' logs; /run/pillar-e2e if empty (tmpfs in the guest).
	StateDir string
	// NodeName is the node's name; the guest's host name if empty.
	NodeName string
	// Log receives one line per step with its guest uptime; os.Stderr if
	// nil.
	Log io.Writer
	// StartTimeout bounds Start as a whole; 20 minutes if zero: under TCG
	// on a host whose two cores three guests share, a start took 9.
	StartTimeout time.Duration
	// PeerName, set in the main guest of a two-guest run (guest.RoleMain),
	// is the name of the node the peer guest joins as (see Join). This
	// node then lives on the guests' link instead of a dummy interface,
	// Start hands the peer its credentials through the share, and returns
	// once the peer's node is Ready too.
	PeerName string
	// ImportImages imports every image into containerd at the start, as a
	// two-guest run does, instead of running the lab registry that the
	// install pushes to and the kubelet pulls from. make check's subset
	// sets it: beside the kernel lab, the pulls (each image decompressed
	// and hashed by the emulated CPU) left the guest's API server unable
	// to answer for minutes.
	ImportImages bool
}

// Mark is one step of the cluster's life, at guest uptime and wall time
// since Start began.
type Mark struct {
	Step   string
	Uptime time.Duration
	Wall   time.Duration
	// MemUsedMiB is the guest's MemTotal less MemAvailable: what the
	// cluster (and its tmpfs state) costs the guest so far.
	MemUsedMiB int
}

// Cluster is a running lab cluster: one node in this guest, and in a
// two-guest run a second one in the peer guest (PeerName).
type Cluster struct {
	opts     Options
	NodeName string
	// NodeIP is the node's address; in a two-guest run PeerName and
	// PeerIP are the other node's.
	NodeIP           string
	PeerName, PeerIP string
	// Kubeconfig is the admin's (system:masters) kubeconfig file.
	Kubeconfig string
	// PauseImage is the sandbox image; Images every reference imported.
	PauseImage string
	Images     []string
	// Registry is the lab registry's host:port (see registry.go), and
	// RegistryCA the CA file that proves it; empty in a two-guest run,
	// whose nodes import the images instead.
	Registry, RegistryCA string
	// Timeline has a Mark per step of Start.
	Timeline []Mark

	start   time.Time
	daemons []*daemon
	kubelet *daemon // nil while StopKubelet has it stopped
	// busyboxApplets are the host busybox's applets, linked into every
	// busybox image the harness builds.
	busyboxApplets []string
	undo           []undoStep
	ca             *ca
	net            nodeNet
	beforeKubelet  func(context.Context) error
	// joinDir holds what the peer needs to join, in the share.
	joinDir string
	// attached is set by Attach: another process owns the cluster.
	attached bool
	// hostCP is the host's control plane, when ControlPlaneEnv names
	// one; nil when this guest runs its own.
	hostCP *hostControlPlane
}

type undoStep struct {
	what string
	fn   func() error
}

func (c *Cluster) onStop(what string, fn func() error) {
	c.undo = append(c.undo, undoStep{what, fn})
}

func (c *Cluster) dir(parts ...string) string {
	return filepath.Join(append([]string{c.opts.StateDir}, parts...)...)
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.opts.BinDir, name) }

// Uptime is the guest's uptime.
func Uptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return time.Duration(f * float64(time.Second))
}

// memUsedMiB is MemTotal - MemAvailable of /proc/meminfo, or -1.
func memUsedMiB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	kb := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			kb[strings.TrimSuffix(f[0], ":")], _ = strconv.Atoi(f[1])
		}
	}
	if kb["MemTotal"] == 0 {
		return -1
	}
	return (kb["MemTotal"] - kb["MemAvailable"]) / 1024
}

// mark records and logs a step.
func (c *Cluster) mark(step string) Mark {
	m := Mark{Step: step, Uptime: Uptime(), Wall: time.Since(c.start), MemUsedMiB: memUsedMiB()}
	c.Timeline = append(c.Timeline, m)
	fmt.Fprintf(c.opts.Log, "cluster: %-40s guest uptime %6.1fs, %6.1fs since start, %4d MiB used\n", step, m.Uptime.Seconds(), m.Wall.Seconds(), m.MemUsedMiB)
	return m
}

// Start prepares the guest and starts the cluster: it returns once the node
// is Ready and a pod has reached the `kubernetes` Service. On failure it
// writes the diagnostics (Dump) to Options.Log, tears down what it started
// and returns the error.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.StateDir == "" {
		o.StateDir = "/run/pillar-e2e"
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 20 * time.Minute
	}
	if o.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node name: %w", err)
		}
		o.NodeName = strings.ToLower(h)
	}
	c := &Cluster{opts: o, NodeName: o.NodeName, start: time.Now(), net: oneGuest()}
	if o.PeerName != "" {
		if r := guest.Role(); r != guest.RoleMain {
			return nil, fmt.Errorf("start the lab cluster with a peer node: this guest's %s is %q, not %q (pillar-lab test -peer-m boots one)", guest.RoleParam, r, guest.RoleMain)
		}
		c.net = linkNet(false)
		c.PeerName, c.PeerIP = o.PeerName, guest.PeerAddr
		c.joinDir = filepath.Join(guest.ShareDir, "join")
	}
	c.NodeIP = c.net.ip
	var err error
	if c.hostCP, err = hostControlPlaneFromEnv(); err != nil {
		return nil, err
	}
	if c.hostCP != nil && c.PeerName != "" {
		return nil, fmt.Errorf("start the lab cluster: a two-guest run has no host control plane ($%s)", ControlPlaneEnv)
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := c.startAll(ctx); err != nil {
		c.Dump(o.Log)
		if serr := c.Stop(); serr != nil {
			fmt.Fprintf(o.Log, "cluster: teardown after the failed start: %v\n", serr)
		}
		return nil, fmt.Errorf("start the lab cluster: %w", err)
	}
	return c, nil
}

func (c *Cluster) startAll(ctx context.Context) error {
	c.mark("start")
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "helm"} {
		if _, err := os.Stat(c.bin(b)); err != nil {
			return fmt.Errorf("%w (make cluster-tools builds it)", err)
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "conntrack", "/usr/lib/cni/bridge"} {
		if _, err := lookPath(b); err != nil {
			return fmt.Errorf("%s: %w (the lab's host packages: pillar-lab provision installs them)", b, err)
		}
	}
	if err := os.MkdirAll(c.dir("logs"), 0o755); err != nil {
		return err
	}
	c.onStop("remove "+c.opts.StateDir, func() error { return os.RemoveAll(c.opts.StateDir) })
	if err := c.prepareNode(ctx); err != nil {
		return err
	}
	c.mark("node prepared")
	if err := c.writePKI(); err != nil {
		return err
	}
	c.mark("certificates written")
	if c.PeerName == "" && !c.opts.ImportImages {
		if err := c.startRegistry(ctx); err != nil {
			return err
		}
		c.mark("registry up at " + c.Registry)
	}
	if err := c.startContainerd(ctx); err != nil {
		return err
	}
	c.mark("containerd up, images imported")
	if err := c.startControlPlane(ctx); err != nil {
		return err
	}
	c.mark("API server ready")
	if err := c.startNode(ctx); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx); err != nil {
		return err
	}
	c.mark("node Ready")
	if err := c.startProxy(); err != nil {
		return err
	}
	if err := c.checkServiceFromPod(ctx); err != nil {
		return err
	}
	c.mark("kubernetes Service reached from a pod")
	if c.PeerName != "" {
		if err := c.waitPeerReady(ctx); err != nil {
			return err
		}
		c.mark("peer node " + c.PeerName + " Ready")
	}
	return nil
}

func lookPath(name string) (string, error) {
	if filepath.IsAbs(name) {
		_, err := os.Stat(name)
		return name, err
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH") + ":/usr/sbin:/sbin") {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("not on PATH: %w", os.ErrNotExist)
}

// writePKI writes the CA, the API server's serving certificate, a client
// certificate per component (each its own user, so RBAC and the Node
// authorizer see the identities a real cluster has), the service-account
// key and the kubeconfigs. With the host's control plane (hostCP) it
// loads that plane's CA instead and writes only what the node needs.
func (c *Cluster) writePKI() error {
	pki := c.dir("pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	var err error
	if c.hostCP != nil {
		if c.ca, err = loadCA(filepath.Join(c.hostCP.dir, "pki")); err != nil {
			return fmt.Errorf("the host's control plane: %w", err)
		}
		if err := os.WriteFile(filepath.Join(pki, "ca.crt"), c.ca.pem, 0o644); err != nil {
			return err
		}
		return c.writeKubeconfigs(c.hostCP.url, "admin", "kubelet", "proxy")
	}
	if c.ca, err = newCA(); err != nil {
		return err
	}
	if err := c.ca.writeCA(pki); err != nil {
		return err
	}
	if err := c.writeServerPKI(pki, c.NodeIP, c.NodeName); err != nil {
		return err
	}
	url := "https://" + c.NodeIP + ":6443"
	if err := c.writeKubeconfigs(url, "admin", "controller-manager", "scheduler", "kubelet", "proxy"); err != nil {
		return err
	}
	if c.PeerName != "" {
		return c.writeJoin(url)
	}
	return nil
}

// writeServerPKI writes the API server's side: the service-account key,
// its serving certificate for hosts (and the names every cluster gives
// it), and its client certificate for the kubelets.
func (c *Cluster) writeServerPKI(pki string, hosts ...string) error {
	if _, _, err := serviceAccountKey(pki); err != nil {
		return err
	}
	server, err := c.ca.issue("kube-apiserver", nil, append(hosts,
		APIServiceIP, "127.0.0.1", "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	))
	if err != nil {
		return err
	}
	if _, _, err := server.write(pki, "apiserver"); err != nil {
		return err
	}
	// The API server's client for the kubelet API (logs, exec), and for
	// the proxy to the kubelets when the host runs the API server.
	kc, err := c.ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	_, _, err = kc.write(pki, "apiserver-kubelet-client")
	return err
}

// writeKubeconfigs writes file.kubeconfig for each named component, with
// a client certificate of its own user, for the API server at url. The
// admin's becomes c.Kubeconfig.
func (c *Cluster) writeKubeconfigs(url string, files ...string) error {
	users := map[string]struct{ cn, org string }{
		"admin":              {"pillar-lab-admin", "system:masters"},
		"controller-manager": {"system:kube-controller-manager", ""},
		"scheduler":          {"system:kube-scheduler", ""},
		"kubelet":            {"system:node:" + c.NodeName, "system:nodes"},
		"proxy":              {"system:kube-proxy", ""},
	}
	for _, file := range files {
		u, ok := users[file]
		if !ok {
			return fmt.Errorf("kubeconfig %q: no such component", file)
		}
		var orgs []string
		if u.org != "" {
			orgs = []string{u.org}
		}
		kp, err := c.ca.issue(u.cn, orgs, nil)
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.dir(file+".kubeconfig"), []byte(kubeconfig(url, c.ca.pem, kp, u.cn)), 0o600); err != nil {
			return err
		}
		if file == "admin" {
			c.Kubeconfig = c.dir("admin.kubeconfig")
		}
	}
	return nil
}

// startContainerd writes containerd's and CNI's configuration, starts
// containerd and imports every image.
func (c *Cluster) startContainerd(ctx context.Context) error {
	tars, err := imageTars(c.opts.ImageDir)
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if c.Registry != "" {
		// The chart's images come from the registry; only the sandbox
		// image, which containerd needs before any pull, is imported.
		var keep []string
		if p := filepath.Join(c.opts.ImageDir, "pause.tar"); slices.Contains(tars, p) {
			keep = append(keep, p)
		}
		tars = keep
	} else if len(c.opts.Images) > 0 {
		var keep []string
		for _, name := range append(slices.Clone(c.opts.Images), "pause") {
			if name == "pause" && slices.Contains(keep, filepath.Join(c.opts.ImageDir, "pause.tar")) {
				continue
			}
			if name == "pause" && !slices.Contains(tars, filepath.Join(c.opts.ImageDir, "pause.tar")) {
				continue // the harness builds one
			}
			t := filepath.Join(c.opts.ImageDir, name+".tar")
			if !slices.Contains(tars, t) {
				return fmt.Errorf("images: %s is missing (make images)", t)
			}
			keep = append(keep, t)
		}
		tars = keep
	}
	imgDir := c.dir("images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	applets, err := busyboxApplets(ctx, hostBusybox)
	if err != nil {
		return err
	}
	c.busyboxApplets = applets
	bb := filepath.Join(imgDir, "busybox.tar")
	if err := writeBusyboxImage(bb, hostBusybox, applets, []string{BusyboxImage}, []string{"/bin/sh"}); err != nil {
		return err
	}
	tars = append(tars, bb)
	pause := filepath.Join(c.opts.ImageDir, "pause.tar")
	if _, err := os.Stat(pause); err == nil {
		refs, err := imageRefs(pause)
		if err != nil {
			return fmt.Errorf("pause image: %w", err)
		}
		c.PauseImage = refs[0]
	} else {
		fmt.Fprintf(c.opts.Log, "cluster: %s is missing (make images): using a busybox sandbox image\n", pause)
		pause = filepath.Join(imgDir, "pause.tar")
		if err := writeBusyboxImage(pause, hostBusybox, applets, []string{fallbackPauseImage},
			[]string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait; done"}); err != nil {
			return err
		}
		c.PauseImage = fallbackPauseImage
		tars = append(tars, pause)
	}

	cniDir := c.dir("cni")
	if err := os.MkdirAll(cniDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cniDir, "10-pillar-lab.conflist"), []byte(cniConfig(c.net.podCIDR)), 0o644); err != nil {
		return err
	}
	cfg := c.dir("containerd.toml")
	certsDir := ""
	if c.Registry != "" {
		certsDir = c.registryCertsDir()
	}
	if err := os.WriteFile(cfg, []byte(containerdConfig(c.PauseImage, cniDir, certsDir)), 0o644); err != nil {
		return err
	}
	if _, err := c.startDaemon("containerd", "containerd", "--config", cfg); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "containerd", 2*time.Minute, func(ctx context.Context) error {
		_, err := run(ctx, 20*time.Second, nil, "ctr", "version")
		return err
	}); err != nil {
		return err
	}
	c.onStop("remove the containers", func() error { return c.removeContainers() })
	for _, t := range tars {
		if err := c.importImage(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// importImage imports one image tarball into the CRI's namespace and
// checks that ctr reports every reference the tarball names.
func (c *Cluster) importImage(ctx context.Context, tarball string) error {
	out, err := run(ctx, 5*time.Minute, nil, "ctr", "-n", "k8s.io", "images", "import", "--all-platforms", tarball)
	if err != nil {
		return fmt.Errorf("import %s: %w", tarball, err)
	}
	refs, err := imageRefs(tarball)
	if err != nil {
		return err
	}
	for _, r := range refs {
		// ctr names a docker reference without a registry by its
		// normalized form.
		if !bytes.Contains(out, []byte(strings.TrimPrefix(r, "docker.io/library/"))) {
			return fmt.Errorf("import %s: ctr did not report %s: %s", tarball, r, out)
		}
	}
	c.Images = append(c.Images, refs...)
	return nil
}

// ImportBusybox imports the harness's busybox image (BusyboxImage's
// content) under the references refs, for suites whose pods name images
// of their own, such as the Kubernetes e2e suite's busybox and nginx
// test images: pods that use them with imagePullPolicy IfNotPresent start
// without a registry. In a two-guest run the peer's node imports it too,
// as it does the images of ImportBusyboxWithTools and ImportAgnhost.
func (c *Cluster) ImportBusybox(ctx context.Context, refs ...string) error {
	if len(refs) == 0 {
		return errors.New("import busybox: no image references")
	}
	out := c.dir("images", fmt.Sprintf("busybox-%d.tar", len(c.Images)))
	if err := writeBusyboxImage(out, hostBusybox, c.busyboxApplets, refs, []string{"/bin/sh"}); err != nil {
		return err
	}
	return c.importTestImage(ctx, out)
}

// ImportBusyboxWithTools imports, under refs, the harness's busybox image
// with host tools over its applets: tools maps a path in the image to the
// host binary copied there (GlibcStandInTools), which comes with the
// shared libraries and the ELF interpreter it loads. It stands in for a
// test image built on glibc, such as the Kubernetes e2e suite's
// glibc-dns-testing, whose pods run GNU options busybox lacks
// (dd oflag=nocache).
func (c *Cluster) ImportBusyboxWithTools(ctx context.Context, tools map[string]string, refs ...string) error {
	if len(refs) == 0 {
		return errors.New("import busybox with tools: no image references")
	}
	files, err := hostToolFiles(tools)
	if err != nil {
		return fmt.Errorf("import %s: %w", strings.Join(refs, ","), err)
	}
	out := c.dir("images", fmt.Sprintf("busybox-tools-%d.tar", len(c.Images)))
	if err := writeBusyboxImage(out, hostBusybox, c.busyboxApplets, refs, []string{"/bin/sh"}, files...); err != nil {
		return err
	}
	return c.importTestImage(ctx, out)
}

// ImportAgnhost builds and imports, under refs, a stand-in for the
// Kubernetes e2e suite's agnhost image: the agnhost binary (built from the
// same k8s.io/kubernetes release as the suite) as /agnhost and the image's
// entrypoint, over the busybox applets, which give the shell and nsenter
// the suite's host-exec pods run.
func (c *Cluster) ImportAgnhost(ctx context.Context, agnhost string, refs ...string) error {
	return c.ImportStatic(ctx, "agnhost", agnhost, refs...)
}

// ImportStatic builds and imports, under refs, an image of the static
// binary bin as /name, its entrypoint, over the busybox applets (a shell
// for kubectl exec and for the logs of a failed start).
func (c *Cluster) ImportStatic(ctx context.Context, name, bin string, refs ...string) error {
	if len(refs) == 0 {
		return fmt.Errorf("import %s: no image references", name)
	}
	out := c.dir("images", fmt.Sprintf("%s-%d.tar", name, len(c.Images)))
	if err := writeBusyboxImage(out, hostBusybox, c.busyboxApplets, refs, []string{"/" + name}, imageFile{name: name, src: bin}); err != nil {
		return err
	}
	return c.importTestImage(ctx, out)
}

// removeContainers kills and deletes every container task, so that no
// shim outlives the cluster.
func (c *Cluster) removeContainers() error {
	ctx := context.Background()
	out, err := run(ctx, time.Minute, nil, "ctr", "-n", "k8s.io", "tasks", "ls", "-q")
	if err != nil {
		return err
	}
	var errs []error
	ids := strings.Fields(string(out))
	for _, id := range ids {
		run(ctx, 30*time.Second, nil, "ctr", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id)
	}
	for _, id := range ids {
		var derr error
		for i := 0; i < 20; i++ {
			_, derr = run(ctx, 30*time.Second, nil, "ctr", "-n", "k8s.io", "tasks", "delete", "-f", id)
			// A killed task whose shim has already reaped it is gone.
			var ce *CmdError
			if derr == nil || (errors.As(derr, &ce) && strings.Contains(ce.Stderr, "not found")) {
				derr = nil
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if derr != nil {
			errs = append(errs, derr)
		}
	}
	return errors.Join(errs...)
}

// daemonGrace is how long a daemon has to exit on SIGTERM at teardown.
const daemonGrace = 30 * time.Second

func (c *Cluster) startDaemon(name, bin string, args ...string) (*daemon, error) {
	if !filepath.IsAbs(bin) && bin != "containerd" {
		bin = c.bin(bin)
	}
	d, err := startDaemon(c.dir("logs"), name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.daemons = append(c.daemons, d)
	// A daemon that has to be killed has still stopped, and the
	// teardown's undo steps after it only need it gone: under TCG
	// kube-apiserver's drain of its watches took longer than the grace
	// once. That is reported, not a failure of the run.
	c.onStop("stop "+name, func() error {
		err := d.stop(daemonGrace)
		if errors.Is(err, errKilled) {
			fmt.Fprintf(c.opts.Log, "cluster: %v\n", err)
			return nil
		}
		return err
	})
	return d, nil
}

// waitFor polls check every half second until it succeeds, a daemon
// exits, or timeout passes; the error names the last failure.
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		for _, d := range c.daemons {
			if ok, err := d.exited(); ok {
				return fmt.Errorf("waiting for %s: %s exited (%v); last check: %w", what, d.name, err, last)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w; last check: %w", what, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// controlPlane says where the control plane listens: in the guest on
// the node's address and the usual ports, on the host on loopback ports
// of its own with the guest's kubelets behind the egress proxy.
type controlPlane struct {
	advertise, bind string
	port            int
	etcdClient      int
	// egressConfig, if set, is the API server's egress selector
	// configuration: how it reaches the kubelets.
	egressConfig string
	// componentPorts are the controller manager's and the scheduler's
	// secure ports (0: their defaults).
	managerPort, schedulerPort int
}

// startControlPlane starts etcd, the API server, the controller manager
// and the scheduler in this guest, or with the host's control plane
// connects to it.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	if c.hostCP != nil {
		return c.connectHostControlPlane(ctx)
	}
	return c.runControlPlane(ctx, controlPlane{advertise: c.NodeIP, bind: "0.0.0.0", port: 6443, etcdClient: 2379})
}

// runControlPlane starts etcd, the API server, the controller manager
// and the scheduler where cp says, and waits for the API server's
// /readyz.
func (c *Cluster) runControlPlane(ctx context.Context, cp controlPlane) error {
	pki := c.dir("pki")
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", cp.etcdClient)
	if _, err := c.startDaemon("etcd", "etcd", "--data-dir", c.dir("etcd"),
		"--listen-client-urls", etcdURL, "--unsafe-no-fsync"); err != nil {
		return err
	}
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--advertise-address=" + cp.advertise, "--bind-address=" + cp.bind, "--secure-port=" + strconv.Itoa(cp.port),
		"--cert-dir=" + c.dir("apiserver-certs"),
		"--tls-cert-file=" + filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file=" + filepath.Join(pki, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--kubelet-client-certificate=" + filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + filepath.Join(pki, "apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--profiling=false",
	}
	if cp.egressConfig != "" {
		args = append(args, "--egress-selector-config-file="+cp.egressConfig)
	}
	if _, err := c.startDaemon("kube-apiserver", "kube-apiserver", args...); err != nil {
		return err
	}
	if err := c.waitReady(ctx, fmt.Sprintf("https://127.0.0.1:%d", cp.port)); err != nil {
		return err
	}
	manager := []string{
		"--kubeconfig=" + c.dir("controller-manager.kubeconfig"),
		"--authentication-kubeconfig=" + c.dir("controller-manager.kubeconfig"),
		"--authorization-kubeconfig=" + c.dir("controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + filepath.Join(pki, "sa.key"),
		"--root-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--cluster-signing-cert-file=" + filepath.Join(pki, "ca.crt"),
		"--cluster-signing-key-file=" + filepath.Join(pki, "ca.key"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--profiling=false",
	}
	if cp.managerPort != 0 {
		manager = append(manager, "--secure-port="+strconv.Itoa(cp.managerPort))
	}
	if _, err := c.startDaemon("kube-controller-manager", "kube-controller-manager", manager...); err != nil {
		return err
	}
	scheduler := []string{
		"--kubeconfig=" + c.dir("scheduler.kubeconfig"),
		"--authentication-kubeconfig=" + c.dir("scheduler.kubeconfig"),
		"--authorization-kubeconfig=" + c.dir("scheduler.kubeconfig"),
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--profiling=false",
	}
	if cp.schedulerPort != 0 {
		scheduler = append(scheduler, "--secure-port="+strconv.Itoa(cp.schedulerPort))
	}
	_, err := c.startDaemon("kube-scheduler", "kube-scheduler", scheduler...)
	return err
}

// waitReady waits for /readyz of the API server at url.
func (c *Cluster) waitReady(ctx context.Context, url string) error {
	tlsCfg, err := c.adminTLS()
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	return c.waitFor(ctx, "the API server's /readyz", 5*time.Minute, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s: %s", resp.Status, bytes.TrimSpace(body))
		}
		return nil
	})
}

func (c *Cluster) adminTLS() (*tls.Config, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.ca.pem)
	kp, err := c.ca.issue("pillar-lab-harness", []string{"system:masters"}, nil)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(kp.cert, kp.key)
	if err != nil {
		return nil, fmt.Errorf("harness client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// startNode starts the kubelet.
func (c *Cluster) startNode(ctx context.Context) error {
	kcfg := c.dir("kubelet.yaml")
	if err := os.WriteFile(kcfg, []byte(kubeletConfig(c.dir("pki", "ca.crt"), c.NodeIP)), 0o644); err != nil {
		return err
	}
	d, err := c.startDaemon("kubelet", "kubelet",
		"--config="+kcfg,
		"--kubeconfig="+c.dir("kubelet.kubeconfig"),
		"--hostname-override="+c.NodeName,
		"--node-ip="+c.NodeIP,
		"--v=1",
	)
	if err != nil {
		return err
	}
	c.kubelet = d
	return nil
}

// StopKubelet stops the main guest's kubelet and nothing else: the pods'
// containers run on, with their mounts and NVMe/TCP connections. To the
// cluster the node is gone (NotReady once its lease lapses), while on the
// node everything goes on, as on a node cut off from the control plane or
// whose kubelet died. StartKubelet brings it back.
func (c *Cluster) StopKubelet() error {
	if c.attached {
		return fmt.Errorf("stop the kubelet: %w", ErrAttached)
	}
	d := c.kubelet
	if d == nil {
		return errors.New("stop the kubelet: it is not running")
	}
	c.kubelet = nil
	// Waits must not take the stop for a crash.
	c.daemons = slices.DeleteFunc(c.daemons, func(x *daemon) bool { return x == d })
	if err := d.stop(daemonGrace); err != nil && !errors.Is(err, errKilled) {
		return err
	}
	return nil
}

// StartKubelet starts the main guest's kubelet again after StopKubelet
// and waits for the node to be Ready.
func (c *Cluster) StartKubelet(ctx context.Context) error {
	if c.attached {
		return fmt.Errorf("start the kubelet: %w", ErrAttached)
	}
	if c.kubelet != nil {
		return errors.New("start the kubelet: it is running")
	}
	if err := c.startNode(ctx); err != nil {
		return err
	}
	return c.waitFor(ctx, "node "+c.NodeName+" Ready", 10*time.Minute, func(ctx context.Context) error {
		return c.nodeReady(ctx, c.NodeName)
	})
}

// startProxy starts kube-proxy. It runs once the node is registered:
// kube-proxy gives up ("Timed out waiting for node to exist") if the
// kubelet, slow to start under emulation, has not registered it in time.
// Its iptables chains stay when it stops; they die with the guest, and
// they reference only addresses that exist in it.
func (c *Cluster) startProxy() error {
	pcfg := c.dir("kube-proxy.yaml")
	if err := os.WriteFile(pcfg, []byte(kubeProxyConfig(c.dir("proxy.kubeconfig"), c.NodeName, c.NodeIP)), 0o644); err != nil {
		return err
	}
	_, err := c.startDaemon("kube-proxy", "kube-proxy", "--config="+pcfg)
	return err
}

// Kubectl runs kubectl as the admin with a timeout and returns stdout.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	return c.KubectlWithin(ctx, 3*time.Minute, stdin, args...)
}

// KubectlWithin is Kubectl bounded by timeout instead of 3 minutes, for a
// command that takes longer on a busy guest (an apply of a whole burst).
func (c *Cluster) KubectlWithin(ctx context.Context, timeout time.Duration, stdin []byte, args ...string) ([]byte, error) {
	return run(ctx, timeout, stdin, c.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
}

// Helm runs helm against the cluster with a timeout and returns stdout.
func (c *Cluster) Helm(ctx context.Context, timeout time.Duration, args ...string) ([]byte, error) {
	return run(ctx, timeout, nil, c.bin("helm"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
}

func (c *Cluster) waitNodeReady(ctx context.Context) error {
	return c.waitFor(ctx, "node "+c.NodeName+" Ready", 5*time.Minute, func(ctx context.Context) error {
		return c.nodeReady(ctx, c.NodeName)
	})
}

// nodeReady reports why node is not Ready, or nil.
func (c *Cluster) nodeReady(ctx context.Context, node string) error {
	out, err := c.Kubectl(ctx, nil, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(string(out)); s != "True" {
		return fmt.Errorf("condition Ready is %q", s)
	}
	return nil
}

// checkServiceFromPod proves what every in-cluster client (the CSI
// sidecars, the controller) relies on: a pod reaches the API server
// through the `kubernetes` Service, i.e. kube-proxy's rules and the pod
// network work. The pod sends plain HTTP to the TLS port; the API server's
// "400 Bad Request" answer proves a round trip to it.
func (c *Cluster) checkServiceFromPod(ctx context.Context) error {
	const name = "pillar-lab-service-check"
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: check
    image: %s
    imagePullPolicy: Never
    command: [sh, -c, 'for i in $(seq 1 60); do printf "GET /version HTTP/1.0\r\n\r\n" | nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" > /tmp/out 2>&1; if grep -q "HTTP/1.0 400" /tmp/out; then cat /tmp/out; exit 0; fi; sleep 1; done; cat /tmp/out; exit 1']
`, name, BusyboxImage)
	// The default service account appears a moment after the API server.
	if err := c.waitFor(ctx, "the default service account", 2*time.Minute, func(ctx context.Context) error {
		_, err := c.Kubectl(ctx, nil, "get", "serviceaccount", "default", "-n", "default")
		return err
	}); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, []byte(manifest), "apply", "-f", "-"); err != nil {
		return err
	}
	var phase string
	err := c.waitFor(ctx, "the Service check pod", 4*time.Minute, func(ctx context.Context) error {
		out, err := c.Kubectl(ctx, nil, "get", "pod", name, "-n", "default", "-o", "jsonpath={.status.phase}")
		if err != nil {
			return err
		}
		phase = strings.TrimSpace(string(out))
		if phase == "Succeeded" || phase == "Failed" {
			return nil
		}
		return fmt.Errorf("phase %q", phase)
	})
	logs, _ := c.Kubectl(ctx, nil, "logs", name, "-n", "default")
	if err != nil {
		return err
	}
	if phase != "Succeeded" {
		return fmt.Errorf("a pod did not reach the API server through the kubernetes Service (%s:443): %s", APIServiceIP, logs)
	}
	if _, err := c.Kubectl(ctx, nil, "delete", "pod", name, "-n", "default", "--wait=false"); err != nil {
		return err
	}
	return nil
}

// Stop tears the cluster down in the reverse order of Start: the
// containers, the components, the node's interface and
// mounts. It reports every step that failed. An attached cluster
// (Attach) is left running for the process that owns it.
func (c *Cluster) Stop() error {
	if c.attached {
		return nil
	}
	var errs []error
	for i := len(c.undo) - 1; i >= 0; i-- {
		if err := c.undo[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.undo[i].what, err))
		}
	}
	c.undo = nil
	return errors.Join(errs...)
}

// Dump writes what explains a failure: every component's log tail, the
// cluster's events and pods, and the kernel log.
func (c *Cluster) Dump(w io.Writer) {
	ctx := context.Background()
	if c.attached {
		c.dumpLogs(w)
	}
	for _, d := range c.daemons {
		state := "running"
		if ok, err := d.exited(); ok {
			state = fmt.Sprintf("exited: %v", err)
		}
		fmt.Fprintf(w, "---- %s (%s), %s ----\n%s\n", d.name, state, d.log, d.tail(16<<10))
	}
	if c.hostCP != nil {
		logs, _ := filepath.Glob(filepath.Join(c.hostCP.dir, "logs", "*.log"))
		for _, l := range logs {
			fmt.Fprintf(w, "---- the host's %s ----\n%s\n", l, TailFile(l, 16<<10))
		}
	}
	if c.Kubeconfig != "" {
		for _, args := range [][]string{
			{"get", "events", "-A", "--sort-by=.lastTimestamp"},
			{"get", "pods", "-A", "-o", "wide"},
			{"describe", "nodes"},
		} {
			out, err := run(ctx, 30*time.Second, nil, c.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
			fmt.Fprintf(w, "---- kubectl %s ----\n%s", strings.Join(args, " "), out)
			if err != nil {
				fmt.Fprintf(w, "(%v)\n", err)
			}
		}
	}
	out, err := run(ctx, 30*time.Second, nil, "dmesg")
	if len(out) > 32<<10 {
		out = out[len(out)-32<<10:]
	}
	fmt.Fprintf(w, "---- kernel log (tail) ----\n%s", out)
	if err != nil {
		fmt.Fprintf(w, "(%v)\n", err)
	}
}
