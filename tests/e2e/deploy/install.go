package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
)

// The names deploy/examples uses: Install applies those files as a user
// would, with only the agent's name and the bind address filled in.
const (
	ZPool     = "tank"
	VG        = "vg0"
	ThinPool  = "thin0"
	Namespace = "pillar-csi"
	Release   = "pillar-csi"
)

// imageRef is the reference make images wrote for one image
// (bin/images/<name>.json).
func imageRef(root, name string) (repo, tag string, err error) {
	b, err := os.ReadFile(filepath.Join(root, "bin", "images", name+".json"))
	if err != nil {
		return "", "", fmt.Errorf("image %s (make images): %w", name, err)
	}
	var m struct{ Reference string }
	if err := json.Unmarshal(b, &m); err != nil {
		return "", "", fmt.Errorf("image %s: %w", name, err)
	}
	i := strings.LastIndex(m.Reference, ":")
	if i < 0 || strings.Contains(m.Reference[i:], "/") {
		return "", "", fmt.Errorf("image %s: reference %q has no tag", name, m.Reference)
	}
	return m.Reference[:i], m.Reference[i+1:], nil
}

// labValues are the chart values of the lab, and only those: the images
// make images built (no registry: pullPolicy Never) and the one node as
// storage node. Everything else is the chart's default, which is what the
// install proves.
func labValues(root, node string) (string, error) {
	img := map[string]string{}
	for _, n := range []string{"pillar-controller", "pillar-agent", "pillar-node", "csi-provisioner", "csi-attacher", "csi-resizer"} {
		repo, tag, err := imageRef(root, n)
		if err != nil {
			return "", err
		}
		img[n] = fmt.Sprintf("{repository: %s, tag: %q, pullPolicy: Never}", repo, tag)
	}
	return fmt.Sprintf(`controller:
  image: %s
  provisioner: {image: %s}
  attacher: {image: %s}
  resizer: {image: %s}
agent:
  image: %s
node:
  image: %s
storageNodes:
  - name: %s
    nodeName: %s
`, img["pillar-controller"], img["csi-provisioner"], img["csi-attacher"], img["csi-resizer"],
		img["pillar-agent"], img["pillar-node"], node, node), nil
}

// example reads a file of deploy/examples and makes the replacements the
// lab needs; a replacement that does not match fails, so the suite notices
// when the documented YAML changes under it.
func example(root, name string, repl ...string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "examples", name))
	if err != nil {
		return "", err
	}
	s := string(b)
	for i := 0; i+1 < len(repl); i += 2 {
		if !strings.Contains(s, repl[i]) {
			return "", fmt.Errorf("deploy/examples/%s no longer says %q", name, repl[i])
		}
		s = strings.ReplaceAll(s, repl[i], repl[i+1])
	}
	return s, nil
}

// Install labels the node as storage node, installs the chart of the
// repository at root with the images make images built there, and applies
// the examples, writing each step's output and timing to log. It returns
// when every Pillar* object is Ready and the generated StorageClasses
// exist.
func Install(ctx context.Context, c *cluster.Cluster, root string, log io.Writer) error {
	step := NewStepLog(log)
	if _, err := c.Kubectl(ctx, nil, "label", "node", c.NodeName, "--overwrite", "pillar-csi.io/storage-node=true"); err != nil {
		return fmt.Errorf("label the storage node: %w", err)
	}
	values, err := labValues(root, c.NodeName)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "values:\n%s", values)
	vf := filepath.Join(os.TempDir(), "pillar-e2e-values.yaml")
	if err := os.WriteFile(vf, []byte(values), 0o644); err != nil {
		return err
	}
	out, err := c.Helm(ctx, 16*time.Minute, "install", Release, filepath.Join(root, "deploy", "charts", "pillar-csi"),
		"--namespace", Namespace, "--create-namespace", "--wait", "--timeout", "15m", "-f", vf)
	fmt.Fprintf(log, "$ helm install %s deploy/charts/pillar-csi -n %s --create-namespace --wait -f values.yaml\n%s", Release, Namespace, out)
	if err != nil {
		return fmt.Errorf("helm install: %w", err)
	}
	step("helm install --wait")
	Show(ctx, c, log, "get", "pods", "-n", Namespace, "-o", "wide")
	Restarts(ctx, c, log)

	zfs, err := example(root, "02-pillarstore-zfs.yaml", "agentName: storage-1", "agentName: "+c.NodeName)
	if err != nil {
		return err
	}
	lvm, err := example(root, "02-pillarstore-lvm-thin.yaml", "agentName: storage-2", "agentName: "+c.NodeName)
	if err != nil {
		return err
	}
	proto, err := example(root, "03-pillarprotocol-nvmeof-tcp.yaml", "bindAddress: 0.0.0.0", "bindAddress: "+cluster.NodeIP)
	if err != nil {
		return err
	}
	// The LVM class of the example keeps released volumes (Retain); the
	// suite checks that a deleted claim leaves nothing behind, so both
	// classes delete.
	classes, err := example(root, "04-pillarstorageclass.yaml", "reclaimPolicy: Retain", "reclaimPolicy: Delete")
	if err != nil {
		return err
	}
	for _, m := range []string{zfs, lvm, proto, classes} {
		if out, err := c.Kubectl(ctx, []byte(m), "apply", "-f", "-"); err != nil {
			return fmt.Errorf("kubectl apply: %w\n%s", err, out)
		}
	}
	step("examples applied")
	objs := []string{"pillaragent/" + c.NodeName, "pillarstore/zfs-tank", "pillarstore/lvm-thin",
		"pillarprotocol/nvmeof-tcp", "pillarstorageclass/zfs-nvmeof", "pillarstorageclass/lvm-nvmeof-xfs"}
	for _, o := range objs {
		if out, err := c.Kubectl(ctx, nil, "wait", "--for=condition=Ready", o, "--timeout=150s"); err != nil {
			Show(ctx, c, log, "get", "pillar", "-o", "wide")
			Show(ctx, c, log, "describe", o)
			return fmt.Errorf("%s not Ready: %w\n%s", o, err, out)
		}
	}
	step("every Pillar* object Ready")
	for _, sc := range []string{"zfs-nvmeof", "lvm-nvmeof-xfs"} {
		if _, err := c.Kubectl(ctx, nil, "get", "storageclass", sc); err != nil {
			return fmt.Errorf("the generated StorageClass %s: %w", sc, err)
		}
	}
	Show(ctx, c, log, "get", "pillar", "-o", "wide")
	Show(ctx, c, log, "get", "storageclass")
	Show(ctx, c, log, "describe", "pillarstore", "zfs-tank")
	return nil
}

// Restarts writes, for every container of pillar-csi that restarted, why
// its last instance ended and that instance's log.
func Restarts(ctx context.Context, c *cluster.Cluster, log io.Writer) int {
	pods, err := c.Kubectl(ctx, nil, "get", "pods", "-n", Namespace, "-o", "name")
	if err != nil {
		fmt.Fprintf(log, "container restarts: %v\n", err)
		return 0
	}
	n := 0
	for _, p := range strings.Fields(string(pods)) {
		st, err := c.Kubectl(ctx, nil, "get", "-n", Namespace, p, "-o",
			`jsonpath={range .status.containerStatuses[*]}{.name}{" "}{.restartCount}{" "}{.lastState.terminated.reason}{" exit "}{.lastState.terminated.exitCode}{"\n"}{end}`)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(st)), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[1] == "0" {
				continue
			}
			n++
			fmt.Fprintf(log, "%s container %s restarted: %s\n", p, f[0], line)
			prev, _ := c.Kubectl(ctx, nil, "logs", "-n", Namespace, p, "-c", f[0], "--previous", "--tail=60")
			fmt.Fprintf(log, "---- %s/%s, the previous instance ----\n%s", p, f[0], prev)
		}
	}
	if n > 0 {
		Show(ctx, c, log, "get", "events", "-n", Namespace, "--sort-by=.lastTimestamp")
	}
	return n
}

// Show writes `kubectl ARGS` and its output to log.
func Show(ctx context.Context, c *cluster.Cluster, log io.Writer, args ...string) {
	out, err := c.Kubectl(ctx, nil, args...)
	fmt.Fprintf(log, "$ kubectl %s\n%s", strings.Join(args, " "), out)
	if err != nil {
		fmt.Fprintf(log, "(%v)\n", err)
	}
}

// NewStepLog returns a function that writes the time since its last call.
func NewStepLog(log io.Writer) func(string) {
	last := time.Now()
	return func(what string) {
		now := time.Now()
		fmt.Fprintf(log, "step %-30s %6.1fs (guest uptime %6.1fs, %d MiB used)\n", what, now.Sub(last).Seconds(), cluster.Uptime().Seconds(), cluster.MemUsedMiB())
		last = now
	}
}

// Diagnose writes what explains a failure of the driver, besides the
// cluster's own Dump: every Pillar* object, claim, volume and pod
// described, and the logs of every container of pillar-csi, sidecars
// included, with the previous instance of any that restarted.
func Diagnose(w io.Writer, c *cluster.Cluster) {
	ctx := context.Background()
	for _, args := range [][]string{
		{"get", "pillar", "-o", "wide"},
		{"describe", "pillar"},
		{"get", "pvc,pv,volumeattachment", "-A", "-o", "wide"},
		{"describe", "pvc", "-A"},
		{"describe", "pv"},
		{"describe", "volumeattachment"},
		{"describe", "pods", "-A"},
		{"get", "csinode", "-o", "yaml"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		Show(ctx, c, w, args...)
	}
	out, err := c.Kubectl(ctx, nil, "get", "pods", "-n", Namespace, "-o",
		`jsonpath={range .items[*]}{.metadata.name}{" "}{range .spec.initContainers[*]}{.name}{","}{end}{range .spec.containers[*]}{.name}{","}{end}{"\n"}{end}`)
	if err != nil {
		fmt.Fprintf(w, "list the pods of %s: %v\n", Namespace, err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		for _, ctr := range strings.Split(strings.TrimSuffix(f[1], ","), ",") {
			for _, prev := range []bool{false, true} {
				args := []string{"logs", "-n", Namespace, f[0], "-c", ctr, "--tail=300"}
				if prev {
					args = append(args, "--previous")
				}
				out, err := c.Kubectl(ctx, nil, args...)
				if prev && err != nil {
					continue // never restarted
				}
				fmt.Fprintf(w, "---- logs %s/%s%s ----\n%s", f[0], ctr, map[bool]string{true: " (previous)"}[prev], out)
				if err != nil {
					fmt.Fprintf(w, "(%v)\n", err)
				}
			}
		}
	}
}
