package reconcile

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

func TestCheckImmutable(t *testing.T) {
	obj := func(ann string) *v1alpha1.PillarStore {
		s := &v1alpha1.PillarStore{}
		if ann != "" {
			s.Annotations = map[string]string{AcceptedSpecAnnotation: ann}
		}
		return s
	}
	fields := func(pool, node string) []immutable {
		return []immutable{{path: "spec.zfs.pool", value: pool}, {path: "spec.nodeName", value: node, onceSet: true}}
	}
	for _, c := range []struct {
		name       string
		ann        string
		pool, node string
		violations []string
		record     string
	}{
		{"first sight records", "", "tank", "", nil, `{"spec.nodeName":"","spec.zfs.pool":"tank"}`},
		{"unchanged records nothing", `{"spec.nodeName":"n1","spec.zfs.pool":"tank"}`, "tank", "n1", nil, ""},
		{"changed is refused", `{"spec.nodeName":"n1","spec.zfs.pool":"tank"}`, "other", "n1",
			[]string{`spec.zfs.pool was "tank" and is now "other"`}, ""},
		{"once-set may be set", `{"spec.nodeName":"","spec.zfs.pool":"tank"}`, "tank", "n1", nil, `{"spec.nodeName":"n1","spec.zfs.pool":"tank"}`},
		{"once-set may not change", `{"spec.nodeName":"n1","spec.zfs.pool":"tank"}`, "tank", "n2",
			[]string{`spec.nodeName was "n1" and is now "n2"`}, ""},
		{"once-set may not be removed", `{"spec.nodeName":"n1","spec.zfs.pool":"tank"}`, "tank", "",
			[]string{`spec.nodeName was "n1" and is now ""`}, ""},
		{"damaged record is rebuilt", `{not json`, "tank", "n1", nil, `{"spec.nodeName":"n1","spec.zfs.pool":"tank"}`},
		{"a new field joins the record", `{"spec.zfs.pool":"tank"}`, "tank", "n1", nil, `{"spec.nodeName":"n1","spec.zfs.pool":"tank"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, rec := checkImmutable(obj(c.ann), fields(c.pool, c.node))
			if !slices.Equal(v, c.violations) || rec != c.record {
				t.Errorf("checkImmutable = %q, %q; want %q, %q", v, rec, c.violations, c.record)
			}
		})
	}
}

func TestValidateProtocol(t *testing.T) {
	p := func(typ v1alpha1.ProtocolType, addr string, port int32) *v1alpha1.PillarProtocol {
		pp := &v1alpha1.PillarProtocol{Spec: v1alpha1.PillarProtocolSpec{Type: typ}}
		if addr != "-" {
			pp.Spec.NVMeOFTCP = &v1alpha1.NVMeOFTCPProtocol{BindAddress: v1alpha1.IPAddress(addr), Port: port}
		}
		return pp
	}
	for _, c := range []struct {
		p     *v1alpha1.PillarProtocol
		ready bool
		says  string
	}{
		{p(v1alpha1.ProtocolNVMeOFTCP, "10.0.0.5", 0), true, "10.0.0.5 port 4420, host ACLs on"},
		{p(v1alpha1.ProtocolNVMeOFTCP, "::", 4421), true, ":: port 4421"},
		{p(v1alpha1.ProtocolNVMeOFTCP, "fe80::1%eth0", 0), false, "without a zone"},
		{p(v1alpha1.ProtocolNVMeOFTCP, "010.0.0.5", 0), false, "is not an IPv4 or IPv6 address"},
		{p(v1alpha1.ProtocolNVMeOFTCP, "storage.example", 0), false, "is not an IPv4 or IPv6 address"},
		{p(v1alpha1.ProtocolNVMeOFTCP, "-", 0), false, "spec.nvmeofTCP is required"},
		{p("iSCSI", "10.0.0.5", 0), false, "the only protocol is NVMeOFTCP"},
		{p(v1alpha1.ProtocolNVMeOFTCP, "10.0.0.5", 70000), false, "is not a TCP port"},
	} {
		v := validateProtocol(c.p)
		if v.ready != c.ready || !strings.Contains(v.message, c.says) {
			t.Errorf("validateProtocol(%+v) = %+v, want ready %v and a message with %q", c.p.Spec.NVMeOFTCP, v, c.ready, c.says)
		}
	}
}

func TestDesiredStorageClass(t *testing.T) {
	p := &v1alpha1.PillarStorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Spec: v1alpha1.PillarStorageClassSpec{
		StoreName: "tank", ProtocolName: "tcp", FSType: v1alpha1.FSTypeXFS, ReclaimPolicy: v1alpha1.ReclaimRetain,
		VolumeBindingMode: v1alpha1.BindingWaitForFirstConsumer, AllowVolumeExpansion: ptr.To(false), MountOptions: []string{"noatime"},
	}}
	sc := desired(p)
	if sc.Name != "fast" || sc.Provisioner != "pillar-csi.io" || sc.Parameters[v1alpha1.StorageClassParamFSType] != "xfs" ||
		sc.Parameters[v1alpha1.StorageClassParamStore] != "tank" || sc.Parameters[v1alpha1.StorageClassParamProtocol] != "tcp" ||
		*sc.ReclaimPolicy != corev1.PersistentVolumeReclaimRetain || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer ||
		*sc.AllowVolumeExpansion || !slices.Equal(sc.MountOptions, []string{"noatime"}) {
		t.Errorf("desired = %+v", sc)
	}
	// Defaults are the CRD's defaults, for objects an old API server stored
	// without them.
	d := desired(&v1alpha1.PillarStorageClass{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: v1alpha1.PillarStorageClassSpec{StoreName: "s", ProtocolName: "p"}})
	if d.Parameters[v1alpha1.StorageClassParamFSType] != "ext4" || *d.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		*d.VolumeBindingMode != storagev1.VolumeBindingImmediate || !*d.AllowVolumeExpansion {
		t.Errorf("defaults = %+v", d)
	}
	// The consent to several writers is a parameter only when given: the
	// classes of every other PillarStorageClass keep the parameters they
	// were made with.
	if _, ok := d.Parameters[v1alpha1.StorageClassParamMultiNodeBlockWriters]; ok || len(d.Parameters) != 3 {
		t.Errorf("parameters of a class without multiNodeBlockWriters: %v", d.Parameters)
	}
	m := desired(&v1alpha1.PillarStorageClass{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: v1alpha1.PillarStorageClassSpec{StoreName: "s", ProtocolName: "p", MultiNodeBlockWriters: true}})
	if m.Parameters[v1alpha1.StorageClassParamMultiNodeBlockWriters] != "true" {
		t.Errorf("parameters of a class with multiNodeBlockWriters: %v", m.Parameters)
	}
	// What Kubernetes forbids changing is told apart from what it allows.
	edited := d.DeepCopy()
	edited.MountOptions = []string{"sync"}
	edited.Labels = map[string]string{"team": "a"}
	if !sameImmutable(edited, d) || sameMutable(edited, d) {
		t.Error("a mountOptions/labels edit must be mutable-only")
	}
	edited = d.DeepCopy()
	edited.Parameters[v1alpha1.StorageClassParamStore] = "other"
	if sameImmutable(edited, d) {
		t.Error("a parameter change must count as immutable")
	}
	if got := mergeLabels(map[string]string{"team": "a"}, d.Labels); got["team"] != "a" || got[ManagedByLabel] != ManagedByValue {
		t.Errorf("mergeLabels kept %v", got)
	}
}

func TestSetReady(t *testing.T) {
	var conds []metav1.Condition
	if !setReady(&conds, notReady("Unreachable", "down"), 1) {
		t.Error("first condition is a transition")
	}
	first := conds[0].LastTransitionTime
	time.Sleep(time.Millisecond * 1100) // metav1.Time has second precision
	if setReady(&conds, notReady("Unreachable", "still down, new text"), 2) {
		t.Error("same status and reason is no transition")
	}
	if conds[0].LastTransitionTime != first || conds[0].Message != "still down, new text" || conds[0].ObservedGeneration != 2 {
		t.Errorf("condition = %+v", conds[0])
	}
	if !setReady(&conds, notReady("TLSFailed", "x"), 2) || !setReady(&conds, ready("AgentReady", "ok"), 2) {
		t.Error("a new reason or status is a transition")
	}
}

func TestBackoff(t *testing.T) {
	var b backoff
	var got []time.Duration
	for range 11 {
		got = append(got, b.next("a"))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(got, want) {
		t.Errorf("backoff = %v, want %v", got, want)
	}
	b.forget("a")
	if d := b.next("a"); d != time.Second {
		t.Errorf("after forget: %v", d)
	}
}

func TestResult(t *testing.T) {
	gr := schema.GroupResource{Group: "pillar-csi.io", Resource: "pillaragents"}
	for _, err := range []error{apierrors.NewConflict(gr, "a", errors.New("x")), apierrors.NewAlreadyExists(gr, "a")} {
		if r, e := result(err); e != nil || r.RequeueAfter != conflictRetry {
			t.Errorf("result(%v) = %v, %v; want a quiet retry", err, r, e)
		}
	}
	if r, e := result(apierrors.NewNotFound(gr, "a")); e != nil || r.RequeueAfter != 0 {
		t.Errorf("result(NotFound) = %v, %v; want to let it go", r, e)
	}
	other := errors.New("boom")
	if _, e := result(other); e != other {
		t.Errorf("result(boom) = %v", e)
	}
}

func TestCallReason(t *testing.T) {
	for msg, want := range map[string]string{
		`rpc error: code = Unavailable desc = connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`: v1alpha1.ReasonTLSFailed,
		`rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`:                                            v1alpha1.ReasonUnreachable,
	} {
		if got := callReason(errors.New(msg)); got != want {
			t.Errorf("callReason(%q) = %s, want %s", msg, got, want)
		}
	}
}

func TestBytesString(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 10 << 30: "10.0 GiB", 3 << 40: "3.0 TiB"} {
		if got := bytesString(n); got != want {
			t.Errorf("bytesString(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestAnnounce(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	obj := &v1alpha1.PillarStore{}
	announce(rec, obj, pending(v1alpha1.ReasonAgentNotReady, "not reached yet"))
	announce(rec, obj, notReady(v1alpha1.ReasonPoolMissing, "no pool"))
	announce(rec, obj, ready(v1alpha1.ReasonStoreAvailable, "ok"))
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{"Warning PoolMissing no pool", "Normal Available ok"}
	if !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q (a pending state earns none)", got, want)
	}
}

// TestRestoredCounts: each growth of an agent instance's exports_restored
// is announced once; a new instance's count is announced whole.
func TestRestoredCounts(t *testing.T) {
	var c restoredCounts
	for _, step := range []struct {
		instance string
		n, want  uint64
	}{
		{"i1", 0, 0}, {"i1", 2, 2}, {"i1", 2, 0}, {"i1", 5, 3}, {"i2", 1, 1}, {"i2", 1, 0},
	} {
		if got := c.increase("agent-a", step.instance, step.n); got != step.want {
			t.Errorf("instance %s reports %d: increase %d, want %d", step.instance, step.n, got, step.want)
		}
	}
	c.forget("agent-a")
	if got := c.increase("agent-a", "i2", 1); got != 1 {
		t.Errorf("after forget: increase %d, want 1", got)
	}
}
