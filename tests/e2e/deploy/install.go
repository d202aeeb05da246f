package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
)

// The names the README's quickstart and deploy/examples use.
const (
	ZPool     = "tank"
	VG        = "vg0"
	ThinPool  = "thin0"
	Namespace = "pillar-csi"
	Release   = "pillar-csi"
	// AgentName is the PillarAgent of the storage node.
	AgentName = "storage-1"
	// ControllerUser is pillar-controller's ServiceAccount as the API
	// server names it (the chart's <fullname>-controller): the only user
	// the chart's ValidatingAdmissionPolicy lets change a
	// PillarVolumeState's spec.
	ControllerUser = "system:serviceaccount:" + Namespace + ":" + Release + "-controller"
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

// labValues are the chart values the lab adds to the quickstart's, and
// only those: leader-election deadlines long enough for an API server
// under emulation, tolerations that let the controller's pods stand for a
// controller on another node when a test loses the one worker, the
// chart's snapshot controller (the lab cluster has none), and, in a
// cluster without the lab registry (two guests), the images make images
// built, imported into the guests (pullPolicy Never). Everything else is
// the quickstart's or the chart's default, which is what the install
// proves.
func labValues(root string, imported bool) (string, error) {
	var controllerImages, agentImage, nodeImage, snapshotImage string
	if imported {
		img := map[string]string{}
		for _, n := range []string{"pillar-controller", "pillar-agent", "pillar-node", "csi-provisioner", "csi-attacher", "csi-resizer",
			"csi-snapshotter", "snapshot-controller"} {
			repo, tag, err := imageRef(root, n)
			if err != nil {
				return "", err
			}
			img[n] = fmt.Sprintf("{repository: %s, tag: %q, pullPolicy: Never}", repo, tag)
		}
		controllerImages = fmt.Sprintf("  image: %s\n  provisioner: {image: %s}\n  attacher: {image: %s}\n  resizer: {image: %s}\n  snapshotter: {image: %s}\n",
			img["pillar-controller"], img["csi-provisioner"], img["csi-attacher"], img["csi-resizer"], img["csi-snapshotter"])
		snapshotImage = fmt.Sprintf("    image: %s\n", img["snapshot-controller"])
		agentImage = fmt.Sprintf("agent:\n  image: %s\n", img["pillar-agent"])
		nodeImage = fmt.Sprintf("node:\n  image: %s\n", img["pillar-node"])
	}
	return `controller:
` + controllerImages + `  # The lab's TCG guest answers API requests in seconds when it is busy;
  # with the chart's 10 s renew deadline the leaders lost their Leases,
  # exited and restarted in a loop.
  leaderElection: {leaseDuration: 60s, renewDeadline: 45s, retryPeriod: 10s}
  # One node is worker and control plane here. When TestWorkerLostForceDetach
  # marks it out of service, its pods are deleted, and a deleted pod's
  # service-account token stops working: pillar-controller and
  # csi-attacher, which must carry out the force-detach, would be cut off
  # from the API server. In a real cluster they run on another node.
  tolerations:
  - {key: node.kubernetes.io/out-of-service, operator: Exists, effect: NoExecute}
  - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute}
` + agentImage + nodeImage + `# The lab cluster has no snapshot controller of its own (a distribution
# usually brings one): the chart's runs.
snapshots:
  controller:
    enabled: true
` + snapshotImage, nil
}

// The quickstart's push and install commands, which the lab changes.
const (
	quickstartPush    = "make push REGISTRY=registry.example:5000/pillar-csi"
	quickstartInstall = "helm install pillar-csi deploy/charts/pillar-csi -f bin/push-values.yaml"
	// pushValues is the values file make push writes, relative to the
	// repository.
	pushValues = "bin/push-values.yaml"
)

// installReplacements are the changes the lab makes to the quickstart's
// install: its storage node's name; the push, which runs the push tool
// of make push against the lab registry with its CA (make would rebuild
// the images in the guest; the host built them), or, without a registry,
// nothing, since the images were imported; and the values files
// (labValues', then any a run adds).
func installReplacements(node string, c registryInfo, valuesFiles ...string) []string {
	install := "helm install pillar-csi deploy/charts/pillar-csi"
	for _, f := range valuesFiles {
		install += " -f " + f
	}
	push := ": the lab imported the images into the guests"
	if c.repository != "" {
		push = fmt.Sprintf("SSL_CERT_FILE=%s bin/imagebuild push -images bin/images -registry %s -values %s", c.ca, c.repository, pushValues)
		// The chart too goes through the registry, as a release's does
		// (make release): packaged, pushed as an OCI artifact and
		// installed from there.
		pkg := fmt.Sprintf("%s/%s-%s.tgz", labChartDir, Release, LabChartVersion)
		install = fmt.Sprintf("helm package deploy/charts/pillar-csi --version %s -d %s && helm push %s oci://%s --ca-file %s && "+
			"helm install pillar-csi oci://%s/pillar-csi --version %s --ca-file %s",
			LabChartVersion, labChartDir, pkg, c.repository, c.ca, c.repository, LabChartVersion, c.ca)
		for _, f := range valuesFiles {
			install += " -f " + f
		}
		install += " -f " + pushValues
	}
	return []string{
		"NODE=storage-node-1", "NODE=" + node,
		quickstartPush, push,
		quickstartInstall, install,
		// Beside the kernel lab's guest, the emulated control plane and
		// the pulls of every image through the registry took the
		// install past the quickstart's 10 minutes once (2026-12-05).
		"--wait --timeout 10m", "--wait --timeout 20m",
	}
}

// LabChartVersion is the version the lab packages the chart with when it
// installs it from its registry, and labChartDir where the package goes.
const (
	LabChartVersion = "0.0.0-lab"
	labChartDir     = "bin/lab-chart"
)

// registryInfo is where the install pushes: the lab registry's repository
// and the CA that proves it; empty without a registry.
type registryInfo struct{ repository, ca string }

func registryOf(c *cluster.Cluster) registryInfo {
	return registryInfo{repository: c.RegistryRepository(), ca: c.RegistryCA}
}

// StorageNode is the name of the cluster's storage node: the peer's in a
// two-guest run, the one node's otherwise.
func StorageNode(c *cluster.Cluster) string {
	if c.PeerName != "" {
		return c.PeerName
	}
	return c.NodeName
}

// Install runs the install of the README's quickstart in the repository
// at root (label the storage node, helm install, apply the examples, wait
// for every Pillar* object to be Ready) with the images make images built
// there, writing each command and its output to log.
//
// In a two-guest run the storage node is first cordoned: the DaemonSets
// still run there, but workloads and the controller go to the main
// guest's node, so that every volume crosses the link between the two
// kernels, and the storage node's power cut leaves the controller up.
//
// extraValues are values files applied after the lab's, for a run that
// measures another setting than the chart's default.
func Install(ctx context.Context, c *cluster.Cluster, root string, log io.Writer, extraValues ...string) error {
	step := NewStepLog(log)
	node := StorageNode(c)
	if c.PeerName != "" {
		if _, err := c.Kubectl(ctx, nil, "cordon", node); err != nil {
			return fmt.Errorf("cordon the storage node: %w", err)
		}
	}
	reg := registryOf(c)
	values, err := labValues(root, reg.repository == "")
	if err != nil {
		return err
	}
	vf := filepath.Join(os.TempDir(), "pillar-e2e-values.yaml")
	if err := os.WriteFile(vf, []byte(values), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(log, "%s:\n%s", vf, values)
	for _, f := range extraValues {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("extra values: %w", err)
		}
		fmt.Fprintf(log, "%s:\n%s", f, b)
	}
	// The snapshot CRDs first, as a cluster administrator installs them
	// (docs/install.md, "Snapshots"): the chart then runs csi-snapshotter
	// and makes its VolumeSnapshotClass.
	if out, err := c.Kubectl(ctx, nil, "apply", "--server-side", "-f", filepath.Join(root, "bin", "snapshot-crds")); err != nil {
		return fmt.Errorf("the snapshot CRDs (make cluster-tools fetches them into bin/snapshot-crds): %w\n%s", err, out)
	}
	step("the snapshot CRDs")
	script, err := QuickstartScript(root, QuickstartInstall, installReplacements(node, reg, append([]string{vf}, extraValues...)...)...)
	if err != nil {
		return err
	}
	if err := c.Shell(ctx, 30*time.Minute, root, script, log); err != nil {
		Show(ctx, c, log, "get", "pods", "-n", Namespace, "-o", "wide")
		Restarts(ctx, c, log)
		Show(ctx, c, log, "describe", "pillar")
		return fmt.Errorf("the README's quickstart install: %w", err)
	}
	step("the README's quickstart install")
	Show(ctx, c, log, "get", "pods", "-n", Namespace, "-o", "wide")
	Restarts(ctx, c, log)
	if reg.repository != "" {
		// Every image the chart runs came from the registry the install
		// pushed to: nothing of it was imported.
		seen, err := c.ImagesFromRegistry(ctx, Namespace)
		if err != nil {
			return fmt.Errorf("the README's quickstart install: %w", err)
		}
		fmt.Fprintf(log, "every container's image was pulled from %s (container, imageID):\n  %s\n", c.Registry, strings.Join(seen, "\n  "))
		// And the chart is the package pushed there.
		chart, err := releaseChart(ctx, c)
		if err != nil {
			return fmt.Errorf("the README's quickstart install: %w", err)
		}
		if want := Release + "-" + LabChartVersion; chart != want {
			return fmt.Errorf("the README's quickstart install: release %s runs chart %s, not %s from oci://%s", Release, chart, want, reg.repository)
		}
		fmt.Fprintf(log, "release %s runs chart %s, installed from oci://%s/pillar-csi\n", Release, chart, reg.repository)
	}
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
		{"get", "pillar,pillar-volumes", "-o", "wide"},
		{"describe", "pillar,pillar-volumes"},
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

// Installed reports whether the chart's release is installed and
// deployed in c: a kept cluster (make e2e-up) keeps the install of one
// run for the next, and a second install of the same release fails. A
// release in another state (failed, pending) is an error: the install
// of an earlier run broke, and only a human knows whether to uninstall.
func Installed(ctx context.Context, c *cluster.Cluster) (bool, error) {
	out, err := c.Helm(ctx, 2*time.Minute, "status", Release, "-n", Namespace, "-o", "json")
	if err != nil {
		var ce *cluster.CmdError
		if errors.As(err, &ce) && strings.Contains(ce.Stderr, "release: not found") {
			return false, nil
		}
		return false, fmt.Errorf("helm status %s: %w", Release, err)
	}
	return releaseDeployed(out)
}

// releaseChart is the chart (name-version) the release runs.
func releaseChart(ctx context.Context, c *cluster.Cluster) (string, error) {
	out, err := c.Helm(ctx, 2*time.Minute, "list", "-n", Namespace, "--filter", "^"+Release+"$", "-o", "json")
	if err != nil {
		return "", fmt.Errorf("helm list: %w", err)
	}
	return listedChart(out)
}

// listedChart reads the one release of `helm list -o json`.
func listedChart(list []byte) (string, error) {
	var releases []struct{ Name, Chart string }
	if err := json.Unmarshal(list, &releases); err != nil {
		return "", fmt.Errorf("helm list: %w", err)
	}
	if len(releases) != 1 {
		return "", fmt.Errorf("helm list: %d releases named %s", len(releases), Release)
	}
	return releases[0].Chart, nil
}

// releaseDeployed reads `helm status -o json`.
func releaseDeployed(status []byte) (bool, error) {
	var st struct {
		Info struct{ Status string }
	}
	if err := json.Unmarshal(status, &st); err != nil {
		return false, fmt.Errorf("helm status %s: %w", Release, err)
	}
	if st.Info.Status != "deployed" {
		return false, fmt.Errorf("release %s is %q, not deployed: uninstall it (helm uninstall -n %s %s) or start the cluster anew (make e2e-down e2e-up)", Release, st.Info.Status, Namespace, Release)
	}
	return true, nil
}
