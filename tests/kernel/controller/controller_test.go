//go:build kernel

package controller

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
)

const mib = int64(1) << 20

// TestAgentAndStores runs a plaintext pillar-agent for node storage-1 with
// a ZFS store and an LVM thin store, checks what the controller writes into
// their statuses against the agent and the storage tools, and then kills
// and restarts the agent.
func TestAgentAndStores(t *testing.T) {
	l := setup(t)
	ctx := context.Background()

	pool := fixture.NewZPool(t, fixture.PoolOptions{Size: 256 * mib})
	// The parent dataset as the agent makes it at the first CreateVolume
	// (backends/zfs createParent): before it exists the agent reports the
	// pool's root instead, and there would be no `zfs get` of
	// POOL/pillar to compare with.
	const parent = "pillar"
	if _, err := fixture.Command(ctx, "create parent dataset", "zfs", "create", "-o", "canmount=off", pool.Name+"/"+parent); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = fixture.Command(ctx, "destroy parent dataset", "zfs", "destroy", "-r", pool.Name+"/"+parent)
	})
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 256 * mib, ThinPoolSize: 128 * mib})
	// A thin LV that is not the store's: the agent promises every thin LV
	// in the pool its full virtual size, owned or not.
	vg.CreateThin(t, "foreign", 48*mib)

	a := startAgent(t, l, "storage-1", nil)
	info, err := a.info()
	if err != nil {
		t.Fatal(err)
	}
	bootID := kernelBootID(t)
	if info.GetBootId() != bootID {
		t.Errorf("GetAgentInfo boot_id = %q, the guest kernel's is %q", info.GetBootId(), bootID)
	}

	pa := agentObj("storage-1", "storage-1", a.port, "")
	zs := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: "storage-1-zfs"}, Spec: v1alpha1.PillarStoreSpec{
		AgentName: "storage-1", Type: v1alpha1.BackendZFS, ZFS: &v1alpha1.ZFSStore{Pool: pool.Name, ParentDataset: parent}}}
	ls := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: "storage-1-lvm-thin"}, Spec: v1alpha1.PillarStoreSpec{
		AgentName: "storage-1", Type: v1alpha1.BackendLVM, LVM: &v1alpha1.LVMStore{VolumeGroup: vg.Name, ThinPool: vg.ThinPool}}}
	l.create(t, pa, zs, ls)

	got := l.waitAgent(t, pa.Name, metav1.ConditionTrue, "AgentReady", nil)
	checkAgentStatus(t, got, info, a)
	firstRestart := got.Status.LastRestartTime

	l.waitCapacity(t, zs.Name, func() (int64, int64, error) { return zfsCapacity(ctx, pool.Name+"/"+parent) })
	l.waitCapacity(t, ls.Name, func() (int64, int64, error) { return thinCapacity(ctx, vg.Name, vg.ThinPool) })

	// SIGKILL: no graceful shutdown, no NOT_SERVING first. The controller
	// learns it from the broken connection.
	a.kill()
	down := l.waitAgent(t, pa.Name, metav1.ConditionFalse, "Unreachable", nil)
	t.Logf("after SIGKILL: Ready=False %s: %s", down.Status.Conditions[0].Reason, readyMessage(down))
	a.start()
	info2, err := a.info()
	if err != nil {
		t.Fatal(err)
	}
	if info2.GetInstanceId() == info.GetInstanceId() {
		t.Fatalf("the restarted agent reports the old instance ID %s", info.GetInstanceId())
	}
	back := l.waitAgent(t, pa.Name, metav1.ConditionTrue, "AgentReady", func(a *v1alpha1.PillarAgent) bool {
		return a.Status.InstanceID != info.GetInstanceId()
	})
	checkAgentStatus(t, back, info2, a)
	if back.Status.BootID != bootID {
		t.Errorf("status.bootID after the restart = %q, want the unchanged %q", back.Status.BootID, bootID)
	}
	if back.Status.LastRestartTime == nil || firstRestart == nil || !back.Status.LastRestartTime.After(firstRestart.Time) {
		t.Errorf("status.lastRestartTime = %v, want later than %v", back.Status.LastRestartTime, firstRestart)
	}
	ev := l.waitEvent(t, pa.Name, "AgentRestarted")
	if ev.Type != "Normal" || !strings.Contains(ev.Note, info2.GetInstanceId()) {
		t.Errorf("AgentRestarted event: type %s, note %q; want Normal, naming instance %s", ev.Type, ev.Note, info2.GetInstanceId())
	}
	if e, ok := l.findEvent(t, pa.Name, "NodeRebooted"); ok {
		t.Errorf("a NodeRebooted event for an agent restart on the same boot: %s", e.Note)
	}
	// The stores answer through the new instance too.
	l.waitCapacity(t, zs.Name, func() (int64, int64, error) { return zfsCapacity(ctx, pool.Name+"/"+parent) })
	l.waitCapacity(t, ls.Name, func() (int64, int64, error) { return thinCapacity(ctx, vg.Name, vg.ThinPool) })
}

// TestMutualTLS runs pillar-agent with mutual TLS on; the PillarAgent
// names a Secret that does not exist yet, then the Secret is created.
func TestMutualTLS(t *testing.T) {
	l := setup(t)
	ctx := context.Background()
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 128 * mib})
	p := newPKI(t)
	a := startAgent(t, l, "storage-2", p)
	info, err := a.info()
	if err != nil {
		t.Fatal(err)
	}

	pa := agentObj("storage-2", "storage-2", a.port, "storage-2-agent-tls")
	ls := &v1alpha1.PillarStore{ObjectMeta: metav1.ObjectMeta{Name: "storage-2-lvm"}, Spec: v1alpha1.PillarStoreSpec{
		AgentName: "storage-2", Type: v1alpha1.BackendLVM, LVM: &v1alpha1.LVMStore{VolumeGroup: vg.Name}}}
	l.create(t, pa, ls)
	missing := l.waitAgent(t, pa.Name, metav1.ConditionFalse, "TLSSecretMissing", nil)
	t.Logf("without its Secret: Ready=False TLSSecretMissing: %s", readyMessage(missing))

	// The Secret watch, not a retry timer, is what is expected to bring the
	// agent up; the wait allows for either.
	l.create(t, p.secret("storage-2-agent-tls"))
	got := l.waitAgent(t, pa.Name, metav1.ConditionTrue, "AgentReady", nil)
	checkAgentStatus(t, got, info, a)
	l.waitCapacity(t, ls.Name, func() (int64, int64, error) { return vgCapacity(ctx, vg.Name) })

	// The agent really refuses a client without a certificate: Ready is
	// not a plaintext fallback.
	conn, err := grpc.NewClient(a.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := agentv1.NewAgentServiceClient(conn).GetAgentInfo(cctx, &agentv1.GetAgentInfoRequest{}); err == nil {
		t.Error("the mutual-TLS agent answered a plaintext GetAgentInfo")
	}
	// Nor does it answer a certificate of its CA issued to another name
	// than -tls-client-name, even with the installation's token.
	stranger, err := grpc.NewClient(a.addr(), grpc.WithTransportCredentials(credentials.NewTLS(p.tlsAs(p.strangerCert, p.strangerKey))),
		grpc.WithPerRPCCredentials(l.token))
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	_, err = agentv1.NewAgentServiceClient(stranger).GetAgentInfo(cctx, &agentv1.GetAgentInfoRequest{})
	if err == nil {
		t.Error("the agent answered a client certificate of its CA issued to tenant-workload, not pillar-controller")
	}
	t.Logf("a certificate of the same CA for another name: %v", err)
}

// checkAgentStatus compares a Ready PillarAgent's status with what the
// agent itself reports.
func checkAgentStatus(t testing.TB, pa *v1alpha1.PillarAgent, info *agentv1.GetAgentInfoResponse, a *agent) {
	t.Helper()
	s := pa.Status
	if info.GetAgentVersion() == "" || info.GetAgentVersion() == "(devel)" {
		t.Errorf("pillar-agent reports version %q: bin/pillar-agent was not built by make (-X main.buildVersion)", info.GetAgentVersion())
	}
	for _, c := range []struct{ field, got, want string }{
		{"agentVersion", s.AgentVersion, info.GetAgentVersion()},
		{"instanceID", s.InstanceID, info.GetInstanceId()},
		{"bootID", s.BootID, info.GetBootId()},
		{"endpoint", s.Endpoint, a.addr()},
	} {
		if c.got != c.want {
			t.Errorf("PillarAgent %s status.%s = %q, want %q (from the agent)", pa.Name, c.field, c.got, c.want)
		}
	}
	if info.GetNodeName() != a.node {
		t.Errorf("GetAgentInfo node_name = %q, want %q", info.GetNodeName(), a.node)
	}
	if s.ObservedGeneration != pa.Generation {
		t.Errorf("status.observedGeneration = %d, want %d", s.ObservedGeneration, pa.Generation)
	}
	t.Logf("PillarAgent %s: version %s, instance %s, boot %s, endpoint %s", pa.Name, s.AgentVersion, s.InstanceID, s.BootID, s.Endpoint)
}

// waitAgent waits until the PillarAgent's Ready condition has the status
// and reason (and also satisfies more, if given), and returns it.
func (l *lab) waitAgent(t testing.TB, name string, status metav1.ConditionStatus, reason string, more func(*v1alpha1.PillarAgent) bool) *v1alpha1.PillarAgent {
	t.Helper()
	var a v1alpha1.PillarAgent
	began := time.Now()
	eventually(t, fmt.Sprintf("PillarAgent %s Ready=%s reason %s", name, status, reason), statusTimeout, func() (bool, string) {
		if err := l.get(name, &a); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil {
			return false, "no Ready condition"
		}
		ok := c.Status == status && c.Reason == reason && c.ObservedGeneration == a.Generation && (more == nil || more(&a))
		return ok, fmt.Sprintf("Ready=%s %s: %s (instance %s)", c.Status, c.Reason, c.Message, a.Status.InstanceID)
	})
	t.Logf("PillarAgent %s Ready=%s %s after %v (guest time)", name, status, reason, time.Since(began).Round(10*time.Millisecond))
	return &a
}

// waitCapacity waits until the PillarStore is Ready (Available) with the
// capacity that want reads from the storage tools at the same moment.
// The agent reads the same figures, so they must be equal to the byte;
// want is read at every look because ZFS's figures move for a while after
// a pool is made (metadata written in later transaction groups).
func (l *lab) waitCapacity(t testing.TB, name string, want func() (total, avail int64, err error)) {
	t.Helper()
	var s v1alpha1.PillarStore
	var total, avail int64
	began := time.Now()
	eventually(t, fmt.Sprintf("PillarStore %s Ready (Available) with the capacity the tools report", name), statusTimeout, func() (bool, string) {
		var err error
		if total, avail, err = want(); err != nil {
			return false, err.Error()
		}
		if err := l.get(name, &s); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil {
			return false, "no Ready condition"
		}
		state := fmt.Sprintf("Ready=%s %s: %s; capacity %+v; the tools say total %d, available %d", c.Status, c.Reason, c.Message, s.Status.Capacity, total, avail)
		return c.Status == metav1.ConditionTrue && c.Reason == "Available" && s.Status.Capacity != nil &&
			s.Status.Capacity.TotalBytes == total && s.Status.Capacity.AvailableBytes == avail, state
	})
	t.Logf("PillarStore %s: total %d, available %d bytes, equal to the tools' (after %v, guest time)", name, total, avail,
		time.Since(began).Round(10*time.Millisecond))
}

// waitEvent waits for an events.k8s.io Event about the named object with
// the reason.
func (l *lab) waitEvent(t testing.TB, name, reason string) eventsv1.Event {
	t.Helper()
	var ev eventsv1.Event
	eventually(t, fmt.Sprintf("a %s event about %s", reason, name), statusTimeout, func() (bool, string) {
		e, ok := l.findEvent(t, name, reason)
		ev = e
		return ok, "no such event yet"
	})
	return ev
}

func (l *lab) findEvent(t testing.TB, name, reason string) (eventsv1.Event, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var evs eventsv1.EventList
	if err := l.admin.List(ctx, &evs); err != nil {
		t.Logf("list events: %v", err)
		return eventsv1.Event{}, false
	}
	for _, e := range evs.Items {
		if e.Regarding.Kind == "PillarAgent" && e.Regarding.Name == name && e.Reason == reason {
			return e, true
		}
	}
	return eventsv1.Event{}, false
}

func (l *lab) get(name string, o client.Object) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return l.admin.Get(ctx, client.ObjectKey{Name: name}, o)
}

func readyMessage(a *v1alpha1.PillarAgent) string {
	if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}

// kernelBootID is the running kernel's boot ID.
func kernelBootID(t testing.TB) string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// ---------------------------------------------------------------- storage tools

// zfsCapacity is what the agent's ZFS backend reports for a store whose
// zvols live under dataset, from `zfs get`: the total is the dataset's
// used plus available (backends/zfs capacity), the available space is
// available (a store without sparse, so no overcommit rule applies).
func zfsCapacity(ctx context.Context, dataset string) (int64, int64, error) {
	out, err := fixture.Command(ctx, "zfs get", "zfs", "get", "-Hp", "-o", "value", "used,available", dataset)
	if err != nil {
		return 0, 0, err
	}
	n, err := numbers(out, 2)
	if err != nil {
		return 0, 0, fmt.Errorf("zfs get used,available %s: %w", dataset, err)
	}
	return n[0] + n[1], n[1], nil
}

// thinCapacity is what the agent's LVM backend reports for a thin-pool
// store, from `lvs`: the total is the pool's size, the available space
// that size less the virtual size of every thin LV in the pool (the
// overcommit rule at its default ratio 1; the pool's data usage does not
// enter).
func thinCapacity(ctx context.Context, vg, pool string) (int64, int64, error) {
	out, err := fixture.LVM(ctx, "lvs", "--noheadings", "--nosuffix", "--units", "b", "--separator", "|",
		"-o", "lv_name,lv_size,pool_lv", vg)
	if err != nil {
		return 0, 0, err
	}
	var size, promised int64
	found := false
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 {
			return 0, 0, fmt.Errorf("lvs: unexpected line %q", line)
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("lvs: size in %q: %w", line, err)
		}
		switch {
		case f[0] == pool:
			size, found = n, true
		case f[2] == pool:
			promised += n
		}
	}
	if !found {
		return 0, 0, fmt.Errorf("lvs: no thin pool %s in %q", pool, out)
	}
	return size, max(size-promised, 0), nil
}

// vgCapacity is what the agent's LVM backend reports for a linear store,
// from `vgs`: the group's size and free space.
func vgCapacity(ctx context.Context, vg string) (int64, int64, error) {
	out, err := fixture.LVM(ctx, "vgs", "--noheadings", "--nosuffix", "--units", "b", "-o", "vg_size,vg_free", vg)
	if err != nil {
		return 0, 0, err
	}
	n, err := numbers(out, 2)
	if err != nil {
		return 0, 0, fmt.Errorf("vgs %s: %w", vg, err)
	}
	return n[0], n[1], nil
}

// numbers parses want whitespace-separated integers.
func numbers(out string, want int) ([]int64, error) {
	f := strings.Fields(out)
	if len(f) != want {
		return nil, fmt.Errorf("want %d numbers, got %q", want, out)
	}
	n := make([]int64, want)
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", out, err)
		}
		n[i] = v
	}
	return n, nil
}
