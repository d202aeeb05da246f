package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// The node's addresses in a one-guest run. They exist only inside the
// guest: the dummy interface carries no traffic anywhere, and nothing is
// routed to the host's interfaces (the guest has no NIC at all).
const (
	nodeCIDR      = "192.168.77.10/24"
	NodeIP        = "192.168.77.10"
	PodCIDR       = "10.244.0.0/24"
	ServiceCIDR   = "10.96.0.0/24"
	APIServiceIP  = "10.96.0.1" // the `kubernetes` Service: the first address of ServiceCIDR
	nodeInterface = "pillar0"
	bridgeName    = "cni0"
	// clusterCIDR holds every node's pod subnet.
	clusterCIDR = "10.244.0.0/16"
	// peerPodCIDR is the pod subnet of a two-guest run's peer node.
	peerPodCIDR = "10.244.1.0/24"
)

// nodeNet is where a node lives on the network.
type nodeNet struct {
	ip      string
	cidr    string // ip/prefix on iface
	podCIDR string
	iface   string
	dummy   bool // iface is created (a dummy) rather than the guest's NIC
	// In a two-guest run, the other node's pod subnet is routed through
	// its address on the link.
	otherPodCIDR, otherIP string
}

// oneGuest is the network of a one-guest run's node.
func oneGuest() nodeNet {
	return nodeNet{ip: NodeIP, cidr: nodeCIDR, podCIDR: PodCIDR, iface: nodeInterface, dummy: true}
}

// linkNet is the network of a two-guest run's node: the main guest's
// (control plane and worker) or the peer's.
func linkNet(peer bool) nodeNet {
	prefix := strings.SplitN(guest.LinkCIDR, "/", 2)[1]
	n := nodeNet{ip: guest.MainAddr, podCIDR: PodCIDR, iface: guest.LinkInterface, otherPodCIDR: peerPodCIDR, otherIP: guest.PeerAddr}
	if peer {
		n = nodeNet{ip: guest.PeerAddr, podCIDR: peerPodCIDR, iface: guest.LinkInterface, otherPodCIDR: PodCIDR, otherIP: guest.MainAddr}
	}
	n.cidr = n.ip + "/" + prefix
	return n
}

// cmdTimeout bounds every short command of the node setup; a modprobe or
// an ip call that takes longer has hung.
const cmdTimeout = time.Minute

// prepareNode makes the guest a Kubernetes node; see the package
// overview for why each step is needed. Each step registers its undo.
func (c *Cluster) prepareNode(ctx context.Context) error {
	if _, err := run(ctx, cmdTimeout, nil, "mount", "--make-rshared", "/"); err != nil {
		return fmt.Errorf("shared mount propagation: %w", err)
	}

	if err := c.moduleTree(ctx); err != nil {
		return err
	}
	for _, m := range kernelvm.ClusterModules {
		if _, err := run(ctx, cmdTimeout, nil, "modprobe", m); err != nil {
			return fmt.Errorf("load the cluster's kernel modules: %w", err)
		}
	}

	if err := delegateCgroups(ctx); err != nil {
		return err
	}

	for k, v := range map[string]string{
		"net/ipv4/ip_forward":                 "1",
		"net/bridge/bridge-nf-call-iptables":  "1",
		"net/bridge/bridge-nf-call-ip6tables": "1",
	} {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", k, err)
		}
	}

	if err := c.nodeNetwork(ctx); err != nil {
		return err
	}
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("node name: %w", err)
	}
	hosts = append(hosts, []byte(fmt.Sprintf("\n%s %s\n", c.NodeIP, c.NodeName))...)
	if c.PeerName != "" {
		hosts = append(hosts, []byte(fmt.Sprintf("%s %s\n", c.PeerIP, c.PeerName))...)
	}
	if err := os.WriteFile("/etc/hosts", hosts, 0o644); err != nil {
		return fmt.Errorf("node name: %w", err)
	}

	for _, dir := range []string{"/var/lib/containerd", "/var/lib/kubelet", c.dir("etcd"), nvmeConfigDir} {
		if err := c.tmpfs(ctx, dir); err != nil {
			return err
		}
	}
	nqn, id := hostIdentity(c.NodeName)
	for name, v := range map[string]string{"hostnqn": nqn, "hostid": id} {
		if err := os.WriteFile(filepath.Join(nvmeConfigDir, name), []byte(v+"\n"), 0o644); err != nil {
			return fmt.Errorf("the node's NVMe host identity: %w", err)
		}
	}
	return nil
}

// nvmeConfigDir holds a node's NVMe host identity (hostnqn, hostid), which
// pillar-node presents to the storage node.
const nvmeConfigDir = "/etc/nvme"

// hostIdentity is the NVMe host NQN and host ID of the node named name:
// the same on every boot of that node, and different from every other
// node's. A real node's nvme-cli install generates its own; the guests
// run the host's userland and would all present the host's.
func hostIdentity(name string) (nqn, id string) {
	sum := sha256.Sum256([]byte("pillar-lab node " + name))
	sum[6] = sum[6]&0x0f | 0x40 // version 4 layout
	sum[8] = sum[8]&0x3f | 0x80 // RFC 4122 variant
	id = fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	return "nqn.2014-08.org.nvmexpress:uuid:" + id, id
}

// nodeNetwork gives the node its address: on a dummy interface with an
// on-link default route in a one-guest run (the kubelet and kube-proxy
// pick the node address from the interface of the default route), on the
// link in a two-guest run, with a route to the other node's pods.
func (c *Cluster) nodeNetwork(ctx context.Context) error {
	n := c.net
	var steps [][]string
	if n.dummy {
		steps = append(steps, []string{"link", "add", n.iface, "type", "dummy"})
	}
	steps = append(steps,
		[]string{"addr", "add", n.cidr, "dev", n.iface},
		[]string{"link", "set", n.iface, "up"},
		[]string{"route", "add", "default", "dev", n.iface})
	if n.otherPodCIDR != "" {
		steps = append(steps, []string{"route", "add", n.otherPodCIDR, "via", n.otherIP, "dev", n.iface})
	}
	for _, args := range steps {
		if _, err := run(ctx, cmdTimeout, nil, "ip", args...); err != nil {
			return fmt.Errorf("node network: %w", err)
		}
		if args[0] == "link" && args[1] == "add" {
			c.onStop("delete the node interface", func() error {
				_, err := run(context.Background(), cmdTimeout, nil, "ip", "link", "del", n.iface)
				return err
			})
		}
	}
	return nil
}

// moduleTree bind-mounts the guest kernel's whole module tree over
// /lib/modules/$(uname -r). The kernel's own module requests (the
// modprobe it runs when kube-proxy's nft needs nf_tables, for one) see it
// too: the lab's init makes the overlay the root the kernel's helpers
// run in, as switch_root does on a real machine.
func (c *Cluster) moduleTree(ctx context.Context) error {
	tree, ok := guest.Param(guest.ModuleTreeParam)
	if !ok {
		return fmt.Errorf("the kernel command line has no %s=: boot the guest with pillar-lab of this tree (kernelvm.Lab.ModuleTree)", guest.ModuleTreeParam)
	}
	if _, err := os.Stat(filepath.Join(tree, "modules.dep")); err != nil {
		return fmt.Errorf("the guest kernel's module tree: %w", err)
	}
	rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return fmt.Errorf("kernel release: %w", err)
	}
	target := filepath.Join("/lib/modules", strings.TrimSpace(string(rel)))
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("module tree: %w", err)
	}
	if _, err := run(ctx, cmdTimeout, nil, "mount", "--bind", tree, target); err != nil {
		return fmt.Errorf("module tree: %w", err)
	}
	c.onStop("unmount the module tree", func() error {
		_, err := run(context.Background(), cmdTimeout, nil, "umount", "-l", target)
		return err
	})

	return nil
}

// delegateCgroups mounts cgroup2 (unless it is there) and enables every
// available controller for the root's children.
func delegateCgroups(ctx context.Context) error {
	const root = "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		if _, err := run(ctx, cmdTimeout, nil, "mount", "-t", "cgroup2", "-o", "nsdelegate", "cgroup2", root); err != nil {
			return fmt.Errorf("cgroup2: %w", err)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup2: %w", err)
	}
	var enable []string
	for _, c := range strings.Fields(string(b)) {
		enable = append(enable, "+"+c)
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644); err != nil {
		return fmt.Errorf("cgroup2: delegate %s: %w", strings.Join(enable, " "), err)
	}
	return nil
}

// tmpfs mounts a fresh tmpfs on dir, unmounted (lazily, with whatever
// pods left mounted under it) at Stop.
func (c *Cluster) tmpfs(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tmpfs %s: %w", dir, err)
	}
	if _, err := run(ctx, cmdTimeout, nil, "mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", dir); err != nil {
		return fmt.Errorf("tmpfs %s: %w", dir, err)
	}
	c.onStop("unmount "+dir, func() error {
		_, err := run(context.Background(), cmdTimeout, nil, "umount", "-l", dir)
		return err
	})
	return nil
}
