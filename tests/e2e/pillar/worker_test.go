//go:build kernel

package pillar_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

// outOfServiceTaint is the taint of Kubernetes' non-graceful node
// shutdown: an operator puts it on a node that is gone, and the cluster
// then deletes the node's pods and detaches their volumes at once instead
// of waiting for a kubelet that will not answer.
const outOfServiceTaint = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"

// TestWorkerLostForceDetach loses the worker of a pod that writes to an
// RWO volume without stopping anything on it: its kubelet stops, the
// pod's container runs on and its kernel keeps the NVMe/TCP connection,
// as on a node cut off from the control plane. The operator marks the
// node out of service; the attach/detach controller force-detaches the
// volume, and ControllerUnpublishVolume must take the volume away from
// that kernel: its host NQN leaves the subsystem's allowed_hosts, its
// controller is torn down and its reconnects are refused, so no write of
// the lost pod reaches the volume after the detach. Then the node comes
// back as from a reboot (every pod process, mount and NVMe/TCP controller
// gone; the stage records kept on the host path), the taint is removed,
// and a new pod reads back everything the lost pod reported written.
//
// One guest is the only worker here, so the new pod runs on the same
// node, after its "reboot"; the storage node's kernel is not rebooted.
func TestWorkerLostForceDetach(t *testing.T) {
	c := setup(t)
	if c.PeerName != "" {
		t.Skip("a two-guest run: the writer may land on the storage node, whose kubelet this test does not stop")
	}
	ctx := context.Background()
	ns := testNamespace(t, c)
	pv, volumeID, id := boundClaim(t, c, ns, "zfs-nvmeof", "256Mi")
	allowed := filepath.Join(fixture.NVMetRoot, "subsystems", id.SubsystemNQN, "allowed_hosts", hostNQN(t, c, c.NodeName))

	volume := "persistentVolumeClaim: {claimName: data}"
	apply(t, c, pod(ns, "ticker", tickerScript, volume, false))
	wait(t, c, ns, "pod/ticker", "condition=Ready", 5*time.Minute)
	podUID := kubectl(t, c, "get", "pod", "-n", ns, "ticker", "-o", "jsonpath={.metadata.uid}")
	// The kubelet serves no logs once it is stopped; the container's log
	// file on the node is read instead.
	ticks := func() []tick { return parseTicks(t, containerLogValues(t, ns, "ticker", podUID, "tick")) }
	poll(t, "three ticks of the writer", 3*time.Minute, 2*time.Second, func() (bool, string) {
		n := len(ticks())
		return n >= 3, fmt.Sprintf("%d ticks", n)
	})
	sum := podSum(t, c, ns, "ticker")
	ctrls := fixture.Controllers(t, id.SubsystemNQN)
	if len(ctrls) != 1 || controllerState(ctrls[0]) != "live" {
		t.Fatalf("initiator controllers of %s: %v, want one live", id.SubsystemNQN, ctrls)
	}
	ctrl := ctrls[0]
	if ok, err := storageHas(ctx, c, allowed); err != nil || !ok {
		t.Fatalf("the node's host NQN is not on the subsystem's allowed_hosts while published (%v)", err)
	}

	// Whatever happens next, the node must come back for the tests after
	// this one.
	restored := false
	t.Cleanup(func() {
		if !restored {
			workerBack(t, c)
		}
	})
	t0 := time.Now()
	if err := c.StopKubelet(); err != nil {
		t.Fatal(err)
	}
	stopped := len(ticks())
	t.Logf("kubelet stopped with %d ticks written; initiator %s is %s", stopped, ctrl, controllerState(ctrl))
	wait(t, c, "", "node/"+c.NodeName, "condition=Ready=Unknown", 5*time.Minute)
	record(t, "worker lost: node NotReady", time.Since(t0))
	kubectl(t, c, "taint", "node", c.NodeName, outOfServiceTaint)
	tTaint := time.Now()

	poll(t, "the VolumeAttachment of "+pv+" gone (force-detach)", 10*time.Minute, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "volumeattachment", "-o", "jsonpath={.items[*].spec.source.persistentVolumeName}")
		return err == nil && !strings.Contains(string(out), pv), fmt.Sprintf("%s %v", out, err)
	})
	detached := time.Now()
	record(t, "worker lost: taint → VolumeAttachment gone", detached.Sub(tTaint))
	if ok, err := storageHas(ctx, c, allowed); err != nil || ok {
		t.Errorf("after the detach the lost node's host NQN is still on the subsystem's allowed_hosts (%v)", err)
	}
	pubs := kubectl(t, c, "get", "pillarvolumestate", volumeID, "-o", "jsonpath={.spec.publications}")
	if pubs != "" {
		t.Errorf("after the detach PillarVolumeState %s still records publications: %s", volumeID, pubs)
	}
	// The denied controller is torn down and refused at every reconnect
	// (reconnectDelaySeconds 10 in the examples): it is not live now, nor
	// after two more reconnect attempts.
	states := []string{controllerState(ctrl)}
	note := func() {
		if s := controllerState(ctrl); s != states[len(states)-1] {
			states = append(states, s)
		}
	}
	// The attacher deletes the VolumeAttachment once ControllerUnpublish
	// has returned, so the controller is normally torn down already.
	poll(t, "the lost node's controller torn down", time.Minute, 200*time.Millisecond, func() (bool, string) {
		note()
		return states[len(states)-1] != "live", strings.Join(states, " → ")
	})
	cut := time.Now()
	for end := time.Now().Add(25 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		note()
	}
	if slices.Contains(states[1:], "live") {
		t.Errorf("the denied controller %s was live again: %s", ctrl, strings.Join(states, " → "))
	}
	t.Logf("initiator %s: %s", ctrl, strings.Join(states, " → "))
	if d := cut.Sub(detached); d > 2*time.Second {
		t.Errorf("the lost node's controller was seen torn down %v after its VolumeAttachment was gone; ControllerUnpublishVolume returned before it was", d)
	}
	// No write of the lost pod may reach the volume once its access is
	// taken away, which ControllerUnpublishVolume did before the
	// VolumeAttachment went. Each chunk is fsynced before its tick is
	// logged with the time (the guest's clock, which is the test's), so a
	// chunk that made it just before may be logged a little after; a tick
	// later than tickSlack after the detach is a write that went through,
	// and the lost pod writes one a second while the states above are
	// watched for 25 s.
	const tickSlack = 5 * time.Second
	written := ticks()
	if len(written) <= stopped {
		t.Errorf("the lost pod wrote nothing after its kubelet stopped (%d ticks): the test did not lose a node that still runs", len(written))
	}
	for _, tk := range written {
		if tk.unix > detached.Add(tickSlack).Unix() {
			t.Errorf("the lost pod wrote chunk %d at %s, after its volume was detached at %s",
				tk.n, time.Unix(tk.unix, 0).UTC().Format(time.TimeOnly), detached.UTC().Format(time.TimeOnly))
		}
	}
	t.Logf("the lost pod reported %d chunks written, the last at %s; the detach was at %s",
		len(written), lastTickTime(written), detached.UTC().Format(time.TimeOnly))

	workerBack(t, c)
	restored = true
	record(t, "worker lost: lost until back and untainted", time.Since(t0))

	readBack(t, c, ns, "", volume, sum, written)
	t.Logf("a new pod read back the blob and all %d chunks the lost pod reported", len(written))
	record(t, "worker lost: lost until the data read back", time.Since(t0))
	kubectl(t, c, "delete", "pod", "-n", ns, "ticker", "--ignore-not-found", "--wait=true", "--timeout=3m")
	deleteClaim(t, c, ns, pv, volumeID, zvolExists, "worker lost")
}

// workerBack does to the lost node what its reboot would, then starts its
// kubelet and removes the out-of-service taint: every NVMe/TCP
// controller is deleted (which fails the I/O queued on it, so that the
// processes waiting for it can die), every process of every pod is
// killed, and everything mounted under the kubelet's directory is
// unmounted. What a reboot keeps stays: containerd's images and the stage
// records on the host path. It waits until the driver's pods are ready
// again.
func workerBack(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	ctrls, _ := filepath.Glob("/sys/class/nvme/nvme*/delete_controller")
	for _, f := range ctrls {
		if err := os.WriteFile(f, []byte("1"), 0o200); err != nil && !os.IsNotExist(err) {
			t.Errorf("delete NVMe controller %s: %v", filepath.Dir(f), err)
		}
	}
	if err := os.WriteFile("/sys/fs/cgroup/kubepods/cgroup.kill", []byte("1"), 0o644); err != nil {
		t.Errorf("kill the pods' processes: %v", err)
	}
	poll(t, "every pod process gone", 2*time.Minute, time.Second, func() (bool, string) {
		n, err := cgroupProcs("/sys/fs/cgroup/kubepods")
		return err == nil && n == 0, fmt.Sprintf("%d processes (%v)", n, err)
	})
	mounts, err := kubeletMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		// A mount below one undone before may have gone with it.
		if _, err := fixture.Command(ctx, "unmount "+m, "umount", "-l", m); err != nil {
			t.Logf("%v", err)
		}
	}
	if left, err := kubeletMounts(); err != nil || len(left) > 0 {
		t.Errorf("mounts left under /var/lib/kubelet: %q (%v)", left, err)
	}
	t.Logf("the node's reboot, as far as it matters: %d NVMe controllers deleted, pod processes killed, %d mounts under /var/lib/kubelet undone", len(ctrls), len(mounts))
	if err := c.StartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	// The taint is not there when the test failed before it was set.
	if out, err := c.Kubectl(ctx, nil, "taint", "node", c.NodeName, outOfServiceTaint+"-"); err != nil && !strings.Contains(string(out)+err.Error(), "not found") {
		t.Errorf("remove the out-of-service taint: %v\n%s", err, out)
	}
	for _, component := range []string{"agent", "node", "controller"} {
		poll(t, "pillar-csi's "+component+" pods ready", 10*time.Minute, 2*time.Second, func() (bool, string) {
			out, err := c.Kubectl(ctx, nil, "get", "pods", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component="+component,
				"-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
			f := strings.Fields(string(out))
			ready := err == nil && len(f) > 0 && !slices.ContainsFunc(f, func(p string) bool { return !strings.HasSuffix(p, "=True") })
			return ready, fmt.Sprintf("%s %v", out, err)
		})
	}
}

// cgroupProcs counts the processes in a cgroup and every cgroup below it.
func cgroupProcs(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return err
		}
		n += len(strings.Fields(string(b)))
		return nil
	})
	return n, err
}

// kubeletMounts lists the mount points below /var/lib/kubelet (the
// directory itself is the lab's tmpfs and stays), deepest first; a
// point mounted twice is listed twice.
func kubeletMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var ms []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], "/var/lib/kubelet/") {
			ms = append(ms, f[4])
		}
	}
	slices.SortStableFunc(ms, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return ms, nil
}

// containerLogValues returns every value of the "key=" lines in the log
// file of the pod's container c, which the kubelet's CRI runtime keeps on
// the node whether the kubelet runs or not.
func containerLogValues(t *testing.T, ns, name, uid, key string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/var/log/pods", ns+"_"+name+"_"+uid, "c", "0.log"))
	if err != nil {
		t.Logf("log of %s/%s: %v", ns, name, err)
		return nil
	}
	var vals []string
	// CRI log lines: "<time> stdout F <line>".
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, " ", 4); len(f) == 4 {
			if v, ok := strings.CutPrefix(strings.TrimSpace(f[3]), key+"="); ok {
				vals = append(vals, v)
			}
		}
	}
	return vals
}

func lastTickTime(ts []tick) string {
	if len(ts) == 0 {
		return "never"
	}
	return time.Unix(ts[len(ts)-1].unix, 0).UTC().Format(time.TimeOnly)
}
