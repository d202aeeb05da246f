//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// What the tests check on the storage node (the backend volume, the nvmet
// subsystem) they check where it is: in this guest in a one-guest run; in
// a two-guest run on the peer, through a privileged pod there that enters
// the node's namespaces, as an operator's `kubectl debug node/...` would.
const storageShellPod = "storage-shell"

var storageShellOnce struct {
	sync.Mutex
	ready bool
}

// onStorage runs argv on the storage node and returns its standard
// output.
func onStorage(ctx context.Context, c *cluster.Cluster, what string, argv ...string) (string, error) {
	if c.PeerName == "" {
		return fixture.Command(ctx, what, argv[0], argv[1:]...)
	}
	if err := storageShell(ctx, c); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	args := append([]string{"exec", "--request-timeout=30s", "-n", "default", storageShellPod, "--", "nsenter", "-t", "1", "-m", "-u", "-i", "-n", "--"}, argv...)
	out, err := c.Kubectl(ctx, nil, args...)
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %w", what, c.PeerName, err)
	}
	return string(out), nil
}

// storageHas reports whether path exists on the storage node.
func storageHas(ctx context.Context, c *cluster.Cluster, path string) (bool, error) {
	out, err := onStorage(ctx, c, "stat "+path, "sh", "-c", `if [ -e "$1" ]; then echo yes; else echo no; fi`, "sh", path)
	if err != nil {
		return false, err
	}
	switch strings.TrimSpace(out) {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	}
	return false, fmt.Errorf("stat %s on the storage node: unexpected answer %q", path, out)
}

// storageShell starts the storage node's shell pod once and waits until
// it runs (again, after the node's power cut: the kubelet recreates its
// container when the node is back).
func storageShell(ctx context.Context, c *cluster.Cluster) error {
	storageShellOnce.Lock()
	defer storageShellOnce.Unlock()
	if !storageShellOnce.ready {
		manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  nodeName: %s
  hostPID: true
  hostNetwork: true
  tolerations: [{operator: Exists}]
  terminationGracePeriodSeconds: 0
  containers:
  - name: shell
    image: %s
    imagePullPolicy: Never
    securityContext: {privileged: true}
    command: [sh, -c, 'trap "exit 0" TERM; while :; do sleep 3600 & wait; done']
`, storageShellPod, c.PeerName, cluster.BusyboxImage)
		if out, err := c.Kubectl(ctx, []byte(manifest), "apply", "-f", "-"); err != nil {
			return fmt.Errorf("the storage node's shell pod: %w\n%s", err, out)
		}
		storageShellOnce.ready = true
	}
	out, err := c.Kubectl(ctx, nil, "wait", "-n", "default", "--for=condition=Ready", "pod/"+storageShellPod, fmt.Sprintf("--timeout=%ds", int((5*time.Minute).Seconds())))
	if err != nil {
		return fmt.Errorf("the storage node's shell pod is not Ready: %w\n%s", err, out)
	}
	return nil
}

// zvolList is every zvol of the storage node's pool, one name a line.
func zvolList(ctx context.Context) (string, error) {
	return onStorage(ctx, lab.c, "list zvols", listZvols()...)
}

// listZvols is the command line that lists every zvol of a storage
// node's pool deploy.ZPool, one name a line.
func listZvols() []string {
	return []string{"zfs", "list", "-H", "-o", "name", "-t", "volume", "-r", deploy.ZPool}
}

func zvolExists(ctx context.Context, id string) (bool, error) {
	out, err := zvolList(ctx)
	return strings.Contains(out, id), err
}

func lvExists(ctx context.Context, id string) (bool, error) {
	out, err := onStorage(ctx, lab.c, "lvs", "lvm", "lvs", "--config", fixture.LVMConfig, "--noheadings", "-o", "lv_name", deploy.VG)
	return strings.Contains(out, id), err
}

// storageIP is the storage node's InternalIP, the address its agent and
// its NVMe/TCP port listen on.
func storageIP(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	ip := kubectl(t, c, "get", "node", deploy.StorageNode(c), "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
	if net.ParseIP(ip) == nil {
		t.Fatalf("the storage node's InternalIP %q", ip)
	}
	return ip
}
