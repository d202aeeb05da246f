//go:build kernel

package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
)

// TestNodeReady checks the node the harness waited for, and reports the
// start-up timeline.
func TestNodeReady(t *testing.T) {
	c := setup(t)
	for _, m := range c.Timeline {
		t.Logf("%-40s guest uptime %6.1fs, wall %6.1fs, %4d MiB used", m.Step, m.Uptime.Seconds(), m.Wall.Seconds(), m.MemUsedMiB)
	}
	out, err := c.Kubectl(context.Background(), nil, "get", "node", c.NodeName, "-o",
		`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}`)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	if len(f) != 3 || f[0] != "True" {
		t.Fatalf("node %s: Ready, kubelet, runtime = %q", c.NodeName, out)
	}
	t.Logf("node %s Ready: kubelet %s, %s; sandbox image %s; images %v", c.NodeName, f[1], f[2], c.PauseImage, c.Images)
}

// TestPodFromLocalImage runs a pod from an image imported into containerd
// (no registry: imagePullPolicy Never) and reads its log.
func TestPodFromLocalImage(t *testing.T) {
	c := setup(t)
	ns := namespace(t, c)
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	s := newSteps(t)
	apply(t, c, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: %s}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: hello
    image: %s
    imagePullPolicy: Never
    command: [sh, -c, 'echo %s > /marker; echo "hello from $(cat /proc/sys/kernel/hostname)"; exec sleep 3600']
`, ns, marker, cluster.BusyboxImage))
	waitReady(t, c, ns, "hello")
	s.done("pod Running")
	out, err := c.Kubectl(context.Background(), nil, "logs", "-n", ns, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello from hello"; strings.TrimSpace(string(out)) != want {
		t.Fatalf("pod log = %q, want %q", out, want)
	}
	s.done("log read")
	// kubectl exec must run in the container's root, which has the
	// marker file the container wrote, not in the node's.
	out, err = c.Kubectl(context.Background(), nil, "exec", "-n", ns, "hello", "--", "cat", "/marker")
	if err != nil {
		t.Fatalf("kubectl exec: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != marker {
		t.Fatalf("kubectl exec cat /marker = %q, want %q: exec does not run in the container's root", got, marker)
	}
	s.done("kubectl exec in the container")
	if _, err := c.Kubectl(context.Background(), nil, "delete", "pod", "-n", ns, "hello", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	s.done("pod deleted")
}

// TestHostPathPod: a pod reads what the node wrote into a hostPath
// directory and writes back into it.
func TestHostPathPod(t *testing.T) {
	c := setup(t)
	ns := namespace(t, c)
	s := newSteps(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in"), []byte("from the node\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	apply(t, c, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hostpath, namespace: %s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: rw
    image: %s
    imagePullPolicy: Never
    command: [sh, -c, 'cat /data/in && echo "from the pod" > /data/out && sync']
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    hostPath: {path: %s, type: Directory}
`, ns, cluster.BusyboxImage, dir))
	waitPhase(t, c, ns, "hostpath", "Succeeded")
	s.done("hostPath pod Succeeded")
	out, err := c.Kubectl(context.Background(), nil, "logs", "-n", ns, "hostpath")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != "from the node" {
		t.Fatalf("pod read %q from the hostPath volume, want %q", out, "from the node")
	}
	b, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatalf("the pod's write did not reach the node: %v", err)
	}
	if strings.TrimSpace(string(b)) != "from the pod" {
		t.Fatalf("node read %q, want %q", b, "from the pod")
	}
}

// TestBidirectionalMountPropagation: a mount a privileged container makes
// inside a Bidirectional volume appears on the node, as a CSI node
// plugin's staging and publishing mounts must.
func TestBidirectionalMountPropagation(t *testing.T) {
	c := setup(t)
	ns := namespace(t, c)
	s := newSteps(t)
	dir := filepath.Join("/run", "pillar-e2e-propagation-"+ns)
	if err := os.MkdirAll(filepath.Join(dir, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if isMountpoint(t, filepath.Join(dir, "inner")) {
			unmount(t, filepath.Join(dir, "inner"))
		}
		os.RemoveAll(dir)
	})
	apply(t, c, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: propagation, namespace: %s}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: mounter
    image: %s
    imagePullPolicy: Never
    securityContext: {privileged: true}
    command: [sh, -c, 'mount -t tmpfs -o size=1m pillar-e2e-prop /plugin/inner && echo mounted > /plugin/inner/marker && exec sleep 3600']
    volumeMounts: [{name: plugin, mountPath: /plugin, mountPropagation: Bidirectional}]
  volumes:
  - name: plugin
    hostPath: {path: %s, type: Directory}
`, ns, cluster.BusyboxImage, dir))
	waitReady(t, c, ns, "propagation")
	s.done("privileged pod Running")
	inner := filepath.Join(dir, "inner")
	deadline := time.Now().Add(30 * time.Second)
	for !isMountpoint(t, inner) {
		if time.Now().After(deadline) {
			t.Fatalf("the container's mount on %s did not propagate to the node", inner)
		}
		time.Sleep(500 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(inner, "marker"))
	if err != nil || strings.TrimSpace(string(b)) != "mounted" {
		t.Fatalf("marker on the propagated mount: %q, %v", b, err)
	}
	s.done("mount seen on the node")
}

// TestHelmInstall installs a small chart of ours with --wait: a
// Deployment whose readiness probe must pass, a Service and a ConfigMap.
func TestHelmInstall(t *testing.T) {
	c := setup(t)
	ns := namespace(t, c)
	s := newSteps(t)
	chart, err := filepath.Abs("testdata/smoke-chart")
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Helm(context.Background(), 5*time.Minute, "install", "smoke", chart,
		"--namespace", ns, "--wait", "--timeout", "4m", "--set", "image="+cluster.BusyboxImage)
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	s.done("helm install --wait")
	got, err := c.Kubectl(context.Background(), nil, "get", "deployment", "-n", ns, "smoke", "-o", "jsonpath={.status.readyReplicas}")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "1" {
		t.Fatalf("readyReplicas = %q after helm install --wait", got)
	}
	if out, err := c.Helm(context.Background(), 3*time.Minute, "uninstall", "smoke", "--namespace", ns, "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	s.done("helm uninstall --wait")
}

// steps logs the duration of each step of a test, with the guest uptime.
type steps struct {
	t    *testing.T
	last time.Time
}

func newSteps(t *testing.T) *steps { return &steps{t: t, last: time.Now()} }

func (s *steps) done(what string) {
	s.t.Helper()
	now := time.Now()
	s.t.Logf("step %-28s %6.1fs (guest uptime %6.1fs)", what, now.Sub(s.last).Seconds(), cluster.Uptime().Seconds())
	s.last = now
}

// namespace creates a namespace for the test, deleted when it ends.
func namespace(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	ns := "e2e-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(ns) > 63 {
		ns = ns[:63]
	}
	if _, err := c.Kubectl(context.Background(), nil, "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	// The admission of pods waits for the namespace's default service
	// account.
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := c.Kubectl(context.Background(), nil, "get", "serviceaccount", "default", "-n", ns); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("namespace %s has no default service account: %v", ns, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.Kubectl(context.Background(), nil, "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
			t.Logf("events in %s:\n%s", ns, out)
			out, _ = c.Kubectl(context.Background(), nil, "describe", "pods", "-n", ns)
			t.Logf("pods in %s:\n%s", ns, out)
		}
		if _, err := c.Kubectl(context.Background(), nil, "delete", "namespace", ns, "--wait=false"); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	return ns
}

func apply(t *testing.T, c *cluster.Cluster, manifest string) {
	t.Helper()
	if out, err := c.Kubectl(context.Background(), []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func waitReady(t *testing.T, c *cluster.Cluster, ns, pod string) {
	t.Helper()
	if out, err := c.Kubectl(context.Background(), nil, "wait", "-n", ns, "--for=condition=Ready", "pod/"+pod, "--timeout=2m"); err != nil {
		t.Fatalf("pod %s/%s not Ready: %v\n%s", ns, pod, err, out)
	}
}

func waitPhase(t *testing.T, c *cluster.Cluster, ns, pod, phase string) {
	t.Helper()
	if out, err := c.Kubectl(context.Background(), nil, "wait", "-n", ns, "--for=jsonpath={.status.phase}="+phase, "pod/"+pod, "--timeout=2m"); err != nil {
		t.Fatalf("pod %s/%s not %s: %v\n%s", ns, pod, phase, err, out)
	}
}

// isMountpoint reports whether path is a mount point in this mount
// namespace.
func isMountpoint(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
			return true
		}
	}
	return false
}

// unmount lazily detaches path, for cleanups; a failure is reported.
func unmount(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "umount", "-l", path).CombinedOutput(); err != nil {
		t.Errorf("umount %s: %v: %s", path, err, out)
	}
}
