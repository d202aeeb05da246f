package kernelvm

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// ClusterModules are the modules the lab cluster (tests/e2e/cluster) loads
// from the whole module tree (Lab.ModuleTree) before it starts Kubernetes:
// pod networking is veth pairs on a bridge (with br_netfilter so that
// Service traffic between pods on it passes iptables), the node address
// lives on a dummy interface, and kube-proxy and the CNI bridge plugin
// program nf_tables through iptables-nft. The kernel requests most of
// these on demand too, but loading them up front turns a missing one into
// a clear error instead of kube-proxy's "Protocol not supported".
// virtio_net and virtio_blk drive the NIC and the disks of a two-guest
// run's guests (there is no udev to load them when the devices appear).
// Provision checks that each exists, so a typo fails there.
var ClusterModules = []string{
	"veth", "bridge", "br_netfilter", "dummy", "overlay",
	"nf_conntrack", "nf_nat", "nf_tables", "nft_compat", "nft_chain_nat",
	"nft_ct", "nft_masq", "nft_nat", "nft_redir", "nft_reject_inet",
	"xt_conntrack", "xt_MASQUERADE", "xt_comment", "xt_mark", "xt_addrtype",
	"xt_nat", "xt_statistic", "xt_multiport", "xt_tcpudp", "xt_set", "xt_physdev",
	"ip_set", "ip_set_hash_ip", "ip_set_hash_net",
	"virtio_net", "virtio_blk",
}

// moduleIndex is a parsed modules.dep plus modules.builtin of one tree.
type moduleIndex struct {
	path    map[string]string   // module name -> path relative to the tree
	deps    map[string][]string // module name -> names it needs
	builtin map[string]bool
}

// moduleName turns "kernel/drivers/nvme/target/nvmet-tcp.ko" or
// "nvmet-tcp" into the kernel's canonical name "nvmet_tcp": the kernel
// treats '-' and '_' in module names as the same character.
func moduleName(s string) string {
	s = path.Base(s)
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(s, ext) {
			s = strings.TrimSuffix(s, ext)
			break
		}
	}
	return strings.ReplaceAll(s, "-", "_")
}

func parseModules(dep, builtin io.Reader) (*moduleIndex, error) {
	ix := &moduleIndex{path: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{}}
	sc := bufio.NewScanner(dep)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name := moduleName(mod)
		ix.path[name] = mod
		for _, d := range strings.Fields(rest) {
			ix.deps[name] = append(ix.deps[name], moduleName(d))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("modules.dep: %w", err)
	}
	sc = bufio.NewScanner(builtin)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			ix.builtin[moduleName(l)] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("modules.builtin: %w", err)
	}
	return ix, nil
}

// loadOrder returns the modules that names need, dependencies first, each
// once. Names built into the kernel are left out. A name that is neither a
// module nor built in is an error: a typo in the module set must not boot
// a guest that silently lacks, say, nvmet-tcp.
func (ix *moduleIndex) loadOrder(names []string) ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string, from string) error
	visit = func(n, from string) error {
		switch state[n] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", n)
		case 2:
			return nil
		}
		if _, ok := ix.path[n]; !ok {
			if ix.builtin[n] {
				state[n] = 2
				return nil
			}
			if from != "" {
				return fmt.Errorf("module %s (needed by %s): %w", n, from, errNotFound)
			}
			return fmt.Errorf("module %s: %w", n, errNotFound)
		}
		state[n] = 1
		for _, d := range ix.deps[n] {
			if err := visit(d, n); err != nil {
				return err
			}
		}
		state[n] = 2
		order = append(order, n)
		return nil
	}
	for _, n := range names {
		if err := visit(moduleName(n), ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}
