package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// A two-guest run's cluster spans two kernels: the main guest runs the
// control plane and is a worker, the peer guest (guest.RolePeer) joins as
// a second node. The main guest hands the peer a kubeconfig for its
// kubelet and one for its kube-proxy through the share, in joinDir; the
// peer reports a failed join there too, so that the main guest stops
// waiting at once and says why.
const (
	joinReady = "ready"
	peerError = "peer-error"
)

// writeJoin issues the peer's kubelet and kube-proxy credentials and
// writes them to the share, the ready marker last.
func (c *Cluster) writeJoin(url string) error {
	if err := os.MkdirAll(c.joinDir, 0o755); err != nil {
		return fmt.Errorf("hand the peer its credentials: %w", err)
	}
	files := map[string][]byte{"ca.crt": c.ca.pem, "node-name": []byte(c.PeerName + "\n")}
	for _, u := range []struct{ file, cn, org string }{
		{"kubelet", "system:node:" + c.PeerName, "system:nodes"},
		{"proxy", "system:kube-proxy", ""},
	} {
		var orgs []string
		if u.org != "" {
			orgs = []string{u.org}
		}
		kp, err := c.ca.issue(u.cn, orgs, nil)
		if err != nil {
			return err
		}
		files[u.file+".kubeconfig"] = []byte(kubeconfig(url, c.ca.pem, kp, u.cn))
	}
	for name, b := range files {
		if err := guest.WriteFileAtomic(filepath.Join(c.joinDir, name), b); err != nil {
			return fmt.Errorf("hand the peer its credentials: %w", err)
		}
	}
	return guest.WriteFileAtomic(filepath.Join(c.joinDir, joinReady), []byte("ready\n"))
}

// waitPeerReady waits for the peer's node to be Ready, or for the peer to
// report that it could not join.
func (c *Cluster) waitPeerReady(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	return c.waitFor(ctx, "peer node "+c.PeerName+" Ready", 15*time.Minute, func(ctx context.Context) error {
		if err := c.PeerFailed(); err != nil {
			cancel(err) // no point in waiting on
			return err
		}
		return c.nodeReady(ctx, c.PeerName)
	})
}

// PeerFailed returns the error the peer reported when it could not join,
// or nil.
func (c *Cluster) PeerFailed() error {
	if c.joinDir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(c.joinDir, peerError))
	if err != nil {
		return nil
	}
	return fmt.Errorf("the peer guest could not join: %s", strings.TrimSpace(string(b)))
}

// JoinOptions say how the peer of a two-guest run joins the main guest's
// cluster.
type JoinOptions struct {
	// BinDir holds kubelet, kube-proxy and kubectl (see Options.BinDir).
	BinDir string
	// ImageDir holds the image tarballs; Images, if set, names the ones
	// to import (file names without .tar), all otherwise.
	ImageDir string
	Images   []string
	// StateDir is as in Options.
	StateDir string
	// BeforeKubelet, if set, runs once the node is prepared (the whole
	// module tree loaded), before containerd and the kubelet start: what
	// a real node's boot does first, such as importing its pools.
	BeforeKubelet func(context.Context) error
	Log           io.Writer
	// Timeout bounds Join; 20 minutes if zero.
	Timeout time.Duration
}

// Join makes the peer guest of a two-guest run a node of the main guest's
// cluster and returns once the node is Ready. Its node name is the one
// the main guest's Options.PeerName gave. The returned Cluster's Kubectl
// acts as the node (its kubelet's credentials). A failure is also
// reported to the main guest through the share.
func Join(ctx context.Context, o JoinOptions) (*Cluster, error) {
	if o.StateDir == "" {
		o.StateDir = "/run/pillar-e2e"
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Timeout == 0 {
		o.Timeout = 20 * time.Minute
	}
	joinDir := filepath.Join(guest.ShareDir, "join")
	c := &Cluster{
		beforeKubelet: o.BeforeKubelet,
		opts:          Options{BinDir: o.BinDir, ImageDir: o.ImageDir, Images: o.Images, StateDir: o.StateDir, Log: o.Log},
		start:         time.Now(),
		net:           linkNet(true),
		joinDir:       joinDir,
	}
	c.NodeIP = c.net.ip
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := c.join(ctx); err != nil {
		c.Dump(o.Log)
		err = fmt.Errorf("join the lab cluster as its peer node: %w", err)
		if werr := guest.WriteFileAtomic(filepath.Join(joinDir, peerError), []byte(err.Error()+"\n")); werr != nil {
			fmt.Fprintf(o.Log, "cluster: report the failed join: %v\n", werr)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) join(ctx context.Context) error {
	c.mark("start")
	if r := guest.Role(); r != guest.RolePeer {
		return fmt.Errorf("this guest's %s is %q, not %q", guest.RoleParam, r, guest.RolePeer)
	}
	for _, b := range []string{"kubelet", "kube-proxy", "kubectl"} {
		if _, err := os.Stat(c.bin(b)); err != nil {
			return fmt.Errorf("%w (make cluster-tools builds it)", err)
		}
	}
	if err := os.MkdirAll(c.dir("pki"), 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir("logs"), 0o755); err != nil {
		return err
	}
	// The node name comes with the credentials; /etc/hosts needs it
	// first, so wait for them before preparing the node.
	if err := guest.WaitFile(ctx, filepath.Join(c.joinDir, joinReady), 15*time.Minute); err != nil {
		return fmt.Errorf("the main guest's credentials: %w", err)
	}
	name, err := os.ReadFile(filepath.Join(c.joinDir, "node-name"))
	if err != nil {
		return err
	}
	c.NodeName = strings.TrimSpace(string(name))
	c.opts.NodeName = c.NodeName
	for src, dst := range map[string]string{
		"ca.crt":             c.dir("pki", "ca.crt"),
		"kubelet.kubeconfig": c.dir("kubelet.kubeconfig"),
		"proxy.kubeconfig":   c.dir("proxy.kubeconfig"),
	} {
		b, err := os.ReadFile(filepath.Join(c.joinDir, src))
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.dir("kubelet.kubeconfig")
	c.mark("credentials received")
	if err := c.prepareNode(ctx); err != nil {
		return err
	}
	c.mark("node prepared")
	if c.beforeKubelet != nil {
		if err := c.beforeKubelet(ctx); err != nil {
			return err
		}
		c.mark("node's own boot steps done")
	}
	if err := c.startContainerd(ctx); err != nil {
		return err
	}
	// What the main guest handed over before this boot (a power cut
	// took it from containerd's tmpfs).
	if err := importHanded(ctx, peerImages(), true, c.importImage); err != nil {
		return err
	}
	c.mark("containerd up, images imported")
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
	return nil
}
