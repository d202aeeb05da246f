package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// rule is one validation rule of the schema and the input it must refuse.
// A create case breaks a valid object before creating it; an update case
// creates the valid object and breaks it in an update (transition rules).
type rule struct {
	name   string
	base   func(name string) client.Object
	create func(client.Object) // nil for update cases
	update func(client.Object) // nil for create cases
	// want are fragments of the API server's message: the field path and
	// the rule's own words.
	want []string
}

func onCreate[T client.Object](name string, base func(string) T, breakIt func(T), want ...string) rule {
	return rule{
		name:   name,
		base:   func(n string) client.Object { return base(n) },
		create: func(o client.Object) { breakIt(o.(T)) },
		want:   want,
	}
}

func onUpdate[T client.Object](name string, base func(string) T, breakIt func(T), want ...string) rule {
	return rule{
		name:   name,
		base:   func(n string) client.Object { return base(n) },
		update: func(o client.Object) { breakIt(o.(T)) },
		want:   want,
	}
}

type (
	pa  = *v1alpha1.PillarAgent
	ps  = *v1alpha1.PillarStore
	pp  = *v1alpha1.PillarProtocol
	psc = *v1alpha1.PillarStorageClass
	pvs = *v1alpha1.PillarVolumeState
	pss = *v1alpha1.PillarSnapshotState
)

var rules = []rule{
	// PillarAgent
	onCreate("agent needs nodeName or address", agent, func(o pa) { o.Spec.NodeName, o.Spec.Address = "", "" },
		"spec: Invalid value", "set nodeName, address or both"),
	onCreate("agent nodeName is an object name", agent, func(o pa) { o.Spec.NodeName = "Storage_1" },
		"spec.nodeName", "must be a Kubernetes object name"),
	onCreate("agent address is an IP or DNS name", agent, func(o pa) { o.Spec.Address = "storage 1.example.com" },
		"spec.address", "must be an IPv4 address, an IPv6 address (without a zone) or a lowercase DNS name"),
	onCreate("agent address is not a malformed IPv4", agent, func(o pa) { o.Spec.Address = "192.0.2.256" },
		"spec.address", "must be an IPv4 address, an IPv6 address"),
	onCreate("agent port is at most 65535", agent, func(o pa) { o.Spec.Port = 65536 },
		"spec.port", "should be less than or equal to 65535"),
	onCreate("agent tls needs the Secret's namespace", agent, func(o pa) {
		o.Spec.TLS = &v1alpha1.AgentTLS{SecretRef: v1alpha1.SecretReference{Name: "pillar-agent-client"}}
	}, "spec.tls.secretRef.namespace", "should be at least 1 chars long"),
	onUpdate("agent nodeName is immutable", agent, func(o pa) { o.Spec.NodeName = "storage-2" },
		"spec: Invalid value", "nodeName cannot be changed or removed once set"),
	onUpdate("agent nodeName cannot be removed", agent, func(o pa) { o.Spec.NodeName = "" },
		"spec: Invalid value", "nodeName cannot be changed or removed once set"),

	// PillarStore
	onCreate("store type is ZFS or LVM", zfsStore, func(o ps) { o.Spec.Type = "Ceph" },
		"spec.type", `Unsupported value: "Ceph"`, `supported values: "ZFS", "LVM"`),
	onCreate("store of type ZFS needs zfs", zfsStore, func(o ps) { o.Spec.ZFS = nil },
		"spec: Invalid value", "zfs must be set when type is ZFS, and only then"),
	onCreate("store of type ZFS refuses lvm", zfsStore, func(o ps) { o.Spec.LVM = &v1alpha1.LVMStore{VolumeGroup: "vg0"} },
		"spec: Invalid value", "lvm must be set when type is LVM, and only then"),
	onCreate("store of type LVM needs lvm", lvmStore, func(o ps) { o.Spec.LVM = nil },
		"spec: Invalid value", "lvm must be set when type is LVM, and only then"),
	onCreate("store agentName is an object name", zfsStore, func(o ps) { o.Spec.AgentName = "-storage" },
		"spec.agentName", "must be a Kubernetes object name"),
	onCreate("zfs pool name", zfsStore, func(o ps) { o.Spec.ZFS.Pool = "1tank" },
		"spec.zfs.pool", "must be a ZFS pool name"),
	onCreate("zfs pool leaves room for volume names", zfsStore, func(o ps) { o.Spec.ZFS.Pool = "t" + strings.Repeat("a", 63) },
		"spec.zfs.pool", "Too long", "63"),
	onCreate("zfs parentDataset path", zfsStore, func(o ps) { o.Spec.ZFS.ParentDataset = "/pillar//volumes" },
		"spec.zfs.parentDataset", "must be a dataset path relative to the pool"),
	onCreate("zfs property names", zfsStore, func(o ps) { o.Spec.ZFS.Properties = map[string]string{"Compression": "lz4"} },
		"spec.zfs.properties", "property names must be native ZFS properties"),
	onCreate("zfs properties managed by pillar-csi", zfsStore, func(o ps) { o.Spec.ZFS.Properties = map[string]string{"volsize": "10G"} },
		"spec.zfs.properties", "volsize, refreservation and reservation are set by pillar-csi"),
	onCreate("zfs property values are bounded", zfsStore, func(o ps) {
		o.Spec.ZFS.Properties = map[string]string{"io.pillar-csi:note": strings.Repeat("x", 1025)}
	}, "spec.zfs.properties", "property values must be at most 1024 characters"),
	onCreate("zfs volmode is dev or none", zfsStore, func(o ps) { o.Spec.ZFS.Properties = map[string]string{"volmode": "full"} },
		"spec.zfs.properties", "volmode must be dev (the default) or none"),
	onCreate("zfs properties are bounded", zfsStore, func(o ps) {
		o.Spec.ZFS.Properties = map[string]string{}
		for i := range 33 {
			o.Spec.ZFS.Properties[fmt.Sprintf("user:p%d", i)] = "x"
		}
	}, "spec.zfs.properties", "Too many", "32"),
	onCreate("lvm volumeGroup name", lvmStore, func(o ps) { o.Spec.LVM.VolumeGroup = "-vg0" },
		"spec.lvm.volumeGroup", "must be an LVM name"),
	onCreate("lvm thinPool name", lvmStore, func(o ps) { o.Spec.LVM.ThinPool = ".." },
		"spec.lvm.thinPool", "must be an LVM name"),
	onUpdate("store agentName is immutable", zfsStore, func(o ps) { o.Spec.AgentName = "storage-2" },
		"spec.agentName", "agentName cannot be changed"),
	onUpdate("store type is immutable", zfsStore, func(o ps) {
		o.Spec.Type, o.Spec.ZFS, o.Spec.LVM = v1alpha1.BackendLVM, nil, &v1alpha1.LVMStore{VolumeGroup: "vg0"}
	}, "spec.type", "type cannot be changed"),
	onUpdate("zfs pool is immutable", zfsStore, func(o ps) { o.Spec.ZFS.Pool = "tank2" },
		"spec.zfs.pool", "pool cannot be changed"),
	onUpdate("zfs parentDataset is immutable", zfsStore, func(o ps) { o.Spec.ZFS.ParentDataset = "other" },
		"spec.zfs: Invalid value", "parentDataset cannot be added, changed or removed"),
	onUpdate("zfs parentDataset cannot be removed", zfsStore, func(o ps) { o.Spec.ZFS.ParentDataset = "" },
		"spec.zfs: Invalid value", "parentDataset cannot be added, changed or removed"),
	onUpdate("lvm volumeGroup is immutable", lvmStore, func(o ps) { o.Spec.LVM.VolumeGroup = "vg1" },
		"spec.lvm.volumeGroup", "volumeGroup cannot be changed"),
	onUpdate("lvm thinPool cannot be removed", lvmStore, func(o ps) { o.Spec.LVM.ThinPool = "" },
		"spec.lvm: Invalid value", "thinPool cannot be added, changed or removed"),

	// PillarProtocol
	onCreate("protocol type", protocol, func(o pp) { o.Spec.Type = "iSCSI" },
		"spec.type", `Unsupported value: "iSCSI"`, `supported values: "NVMeOFTCP"`),
	onCreate("protocol NVMeOFTCP needs nvmeofTCP", protocol, func(o pp) { o.Spec.NVMeOFTCP = nil },
		"spec: Invalid value", "nvmeofTCP must be set when type is NVMeOFTCP, and only then"),
	onCreate("protocol bindAddress is required", protocol, func(o pp) { o.Spec.NVMeOFTCP.BindAddress = "" },
		"spec.nvmeofTCP.bindAddress", "should be at least 2 chars long"),
	onCreate("protocol bindAddress is an IP address", protocol, func(o pp) { o.Spec.NVMeOFTCP.BindAddress = "storage-1" },
		"spec.nvmeofTCP.bindAddress", "must be an IPv4 address (such as 192.0.2.10) or an IPv6 address (such as 2001:db8::10), without a zone"),
	onCreate("protocol bindAddress has no zone", protocol, func(o pp) { o.Spec.NVMeOFTCP.BindAddress = "fe80::1%eth0" },
		"spec.nvmeofTCP.bindAddress", "without a zone"),
	onCreate("protocol port is at least 1", protocol, func(o pp) { o.Spec.NVMeOFTCP.Port = -1 },
		"spec.nvmeofTCP.port", "should be greater than or equal to 1"),
	onCreate("connect ctrlLossTimeoutSeconds is -1 or more", protocol, func(o pp) { o.Spec.NVMeOFTCP.Connect.CtrlLossTimeoutSeconds = ptr.To[int32](-2) },
		"spec.nvmeofTCP.connect.ctrlLossTimeoutSeconds", "should be greater than or equal to -1"),
	onCreate("connect reconnectDelaySeconds is positive", protocol, func(o pp) { o.Spec.NVMeOFTCP.Connect.ReconnectDelaySeconds = ptr.To[int32](0) },
		"spec.nvmeofTCP.connect.reconnectDelaySeconds", "should be greater than or equal to 1"),
	onCreate("connect keepAliveTimeoutSeconds is positive", protocol, func(o pp) { o.Spec.NVMeOFTCP.Connect.KeepAliveTimeoutSeconds = ptr.To[int32](0) },
		"spec.nvmeofTCP.connect.keepAliveTimeoutSeconds", "should be greater than or equal to 1"),
	onCreate("connect nrIOQueues is positive", protocol, func(o pp) { o.Spec.NVMeOFTCP.Connect.NrIOQueues = ptr.To[int32](0) },
		"spec.nvmeofTCP.connect.nrIOQueues", "should be greater than or equal to 1"),
	onCreate("connect queueSize is the kernel's 16..1024", protocol, func(o pp) { o.Spec.NVMeOFTCP.Connect.QueueSize = ptr.To[int32](8) },
		"spec.nvmeofTCP.connect.queueSize", "should be greater than or equal to 16"),

	// PillarStorageClass
	onCreate("class storeName is required", storageClass, func(o psc) { o.Spec.StoreName = "" },
		"spec.storeName", "should be at least 1 chars long"),
	onCreate("class protocolName is an object name", storageClass, func(o psc) { o.Spec.ProtocolName = "NVMe" },
		"spec.protocolName", "must be a Kubernetes object name"),
	onCreate("class fsType is ext4 or xfs", storageClass, func(o psc) { o.Spec.FSType = "btrfs" },
		"spec.fsType", `Unsupported value: "btrfs"`, `supported values: "ext4", "xfs"`),
	onCreate("class reclaimPolicy", storageClass, func(o psc) { o.Spec.ReclaimPolicy = "Recycle" },
		"spec.reclaimPolicy", `Unsupported value: "Recycle"`),
	onCreate("class volumeBindingMode", storageClass, func(o psc) { o.Spec.VolumeBindingMode = "Later" },
		"spec.volumeBindingMode", `Unsupported value: "Later"`),
	onCreate("class mountOptions are bounded", storageClass, func(o psc) { o.Spec.MountOptions = make([]string, 33) },
		"spec.mountOptions", "Too many", "32"),
	onUpdate("class storeName is immutable", storageClass, func(o psc) { o.Spec.StoreName = "lvm-vg0" },
		"spec.storeName", "storeName cannot be changed (StorageClass parameters are immutable)"),
	onUpdate("class protocolName is immutable", storageClass, func(o psc) { o.Spec.ProtocolName = "nvmeof-2" },
		"spec.protocolName", "protocolName cannot be changed"),
	onUpdate("class fsType is immutable", storageClass, func(o psc) { o.Spec.FSType = v1alpha1.FSTypeXFS },
		"spec.fsType", "fsType cannot be changed"),
	onUpdate("class reclaimPolicy is immutable", storageClass, func(o psc) { o.Spec.ReclaimPolicy = v1alpha1.ReclaimRetain },
		"spec.reclaimPolicy", "reclaimPolicy cannot be changed"),
	onUpdate("class volumeBindingMode is immutable", storageClass, func(o psc) { o.Spec.VolumeBindingMode = v1alpha1.BindingWaitForFirstConsumer },
		"spec.volumeBindingMode", "volumeBindingMode cannot be changed"),

	// PillarVolumeState
	onCreate("volume name equals volumeID", volumeState, func(o pvs) { o.Spec.VolumeID = "pvc-other" },
		"metadata.name must equal spec.volumeID"),
	onCreate("volumeID form", volumeState, func(o pvs) { o.Name, o.Spec.VolumeID = "pvc.", "pvc." },
		"spec.volumeID", "must be a pillar-csi volume ID"),
	onCreate("volumeID length", volumeState, func(o pvs) { o.Name = strings.Repeat("v", 129); o.Spec.VolumeID = o.Name },
		"spec.volumeID", "Too long", "128"),
	onCreate("volume capacity is positive", volumeState, func(o pvs) { o.Spec.CapacityBytes = 0 },
		"spec.capacityBytes", "should be greater than or equal to 1"),
	onCreate("export bindAddress is an IP address", volumeState, func(o pvs) { o.Spec.Export.BindAddress = "2001:db8:::1" },
		"spec.export.bindAddress", "must be an IPv4 address"),
	onCreate("export port has no default", volumeState, func(o pvs) { o.Spec.Export.Port = 0 },
		"spec.export.port", "should be greater than or equal to 1"),
	onCreate("export aclEnabled has no default", volumeState, func(o pvs) { o.Spec.Export.ACLEnabled = nil },
		"spec.export.aclEnabled", "Required value"),
	onCreate("export subsystemNQN is an NQN", volumeState, func(o pvs) { o.Spec.Export.SubsystemNQN = "nqn.2026-01.io.pillar-csi/volume" },
		"spec.export.subsystemNQN", "must be an NVMe Qualified Name"),
	onCreate("publication hostNQN is an NQN", volumeState, func(o pvs) { o.Spec.Publications[0].HostNQN = "worker-1" },
		"spec.publications[0].hostNQN", "must be an NVMe Qualified Name"),
	onCreate("publication accessMode", volumeState, func(o pvs) { o.Spec.Publications[0].AccessMode = "ReadWriteSometimes" },
		"spec.publications[0].accessMode", `Unsupported value: "ReadWriteSometimes"`),
	onCreate("a ReadWriteMany publication needs the class's consent", volumeState, func(o pvs) {
		o.Spec.Publications[0].AccessMode = v1alpha1.AccessReadWriteMany
	}, "spec: Invalid value", "a ReadWriteMany publication needs multiNodeBlockWriters"),
	onCreate("ReadWriteMany and ReadOnlyMany do not mix", volumeState, func(o pvs) {
		o.Spec.MultiNodeBlockWriters = true
		o.Spec.Publications[0].AccessMode = v1alpha1.AccessReadWriteMany
		o.Spec.Publications = append(o.Spec.Publications,
			v1alpha1.Publication{NodeID: "worker-2", HostNQN: hostB, AccessMode: v1alpha1.AccessReadOnlyMany, ReadOnly: true})
	}, "spec: Invalid value", "ReadOnlyMany and ReadWriteMany ones do not mix"),
	onUpdate("multiNodeBlockWriters is immutable", volumeState, func(o pvs) { o.Spec.MultiNodeBlockWriters = true },
		"spec.multiNodeBlockWriters", "multiNodeBlockWriters cannot be changed"),
	onUpdate("a class's multiNodeBlockWriters is immutable", storageClass, func(o psc) { o.Spec.MultiNodeBlockWriters = true },
		"spec.multiNodeBlockWriters", "multiNodeBlockWriters cannot be changed"),
	onCreate("one publication per node", volumeState, func(o pvs) {
		o.Spec.Publications[0].AccessMode = v1alpha1.AccessReadOnlyMany
		o.Spec.Publications = append(o.Spec.Publications, o.Spec.Publications[0])
	}, "spec.publications[1]", `Duplicate value: {"nodeID":"worker-1"}`),
	onCreate("a writable publication is exclusive", volumeState, func(o pvs) {
		o.Spec.Publications = append(o.Spec.Publications,
			v1alpha1.Publication{NodeID: "worker-2", HostNQN: hostB, AccessMode: v1alpha1.AccessReadOnlyMany, ReadOnly: true})
	}, "spec: Invalid value", "a ReadWriteOnce or ReadWriteOncePod publication excludes every other publication"),
	onCreate("publicationGeneration is not negative", volumeState, func(o pvs) { o.Spec.PublicationGeneration = -1 },
		"spec.publicationGeneration", "should be greater than or equal to 0"),
	onUpdate("volumeID is immutable", volumeState, func(o pvs) { o.Spec.VolumeID = "pvc-renamed" },
		"spec.volumeID", "volumeID cannot be changed"),
	onUpdate("volume storeName is immutable", volumeState, func(o pvs) { o.Spec.StoreName = "lvm-vg0" },
		"spec.storeName", "storeName cannot be changed: the volume's data lives in that store"),
	onUpdate("volume protocolName is immutable", volumeState, func(o pvs) { o.Spec.ProtocolName = "" },
		"spec: Invalid value", "protocolName cannot be changed or removed once set"),
	onUpdate("volume capacity never shrinks", volumeState, func(o pvs) { o.Spec.CapacityBytes-- },
		"spec.capacityBytes", "capacityBytes cannot shrink"),
	onUpdate("export cannot be removed", volumeState, func(o pvs) { o.Spec.Export = nil },
		"spec: Invalid value", "export cannot be removed once recorded"),
	onUpdate("export subsystemNQN is immutable", volumeState, func(o pvs) {
		o.Spec.Export.SubsystemNQN = "nqn.2026-01.io.pillar-csi:volume:other"
	}, "spec.export: Invalid value", "subsystemNQN cannot be changed or removed once set"),
	onUpdate("export aclEnabled never turns off", volumeState, func(o pvs) { o.Spec.Export.ACLEnabled = ptr.To(false) },
		"spec.export: Invalid value", "aclEnabled cannot go from true to false"),
	onUpdate("publicationGeneration never decreases", volumeState, func(o pvs) { o.Spec.PublicationGeneration = 0 },
		"spec.publicationGeneration", "publicationGeneration cannot decrease"),
	onCreate("dataSource names one source", volumeState, func(o pvs) {
		o.Spec.DataSource = &v1alpha1.VolumeDataSource{SnapshotID: "snapshot-1", VolumeID: "pvc-1"}
	}, "spec.dataSource", "exactly one of snapshotID and volumeID"),
	onUpdate("dataSource cannot be added", volumeState, func(o pvs) { o.Spec.DataSource = &v1alpha1.VolumeDataSource{VolumeID: "pvc-1"} },
		"spec: Invalid value", "dataSource cannot be added or removed"),
	onUpdate("dataSource is immutable", restoredVolumeState, func(o pvs) { o.Spec.DataSource.SnapshotID = "snapshot-2" },
		"spec.dataSource", "dataSource cannot be changed"),

	// PillarSnapshotState
	onCreate("snapshot name is its ID", snapshotState, func(o pss) { o.Spec.SnapshotID = "snapshot-other" },
		"Invalid value", "metadata.name must equal spec.snapshotID"),
	onUpdate("snapshot source is immutable", snapshotState, func(o pss) { o.Spec.SourceVolumeID = "pvc-other" },
		"spec.sourceVolumeID", "sourceVolumeID cannot be changed"),
	onUpdate("snapshot store is immutable", snapshotState, func(o pss) { o.Spec.StoreName = "lvm-vg0" },
		"spec.storeName", "storeName cannot be changed: the snapshot's data lives in that store"),
}

// TestValidationRules proves each rule of the schema refuses its bad input
// with a message an operator can act on. Run with -v to read the messages.
func TestValidationRules(t *testing.T) {
	for i, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			c := ctx(t)
			name := fmt.Sprintf("rule-%d", i)
			obj := r.base(name)
			if r.create != nil {
				r.create(obj)
			}
			err := k8s.Create(c, obj, strict)
			if r.update != nil {
				if err != nil {
					t.Fatalf("creating the valid object: %v", err)
				}
				r.update(obj)
				err = k8s.Update(c, obj, strict)
			}
			if err == nil {
				t.Fatalf("accepted; want refused with %q", r.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error is %v, want Invalid (422)", err)
			}
			for _, w := range r.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message lacks %q:\n%v", w, err)
				}
			}
			t.Logf("refused: %v", err)
		})
	}
}

// The fixtures themselves must be accepted, or every rule test above would
// pass for the wrong reason.
func TestFixturesAreValid(t *testing.T) {
	c := ctx(t)
	for _, obj := range []client.Object{
		agent("valid-agent"), zfsStore("valid-zfs"), lvmStore("valid-lvm"),
		protocol("valid-protocol"), storageClass("valid-class"), volumeState("valid-volume"),
		restoredVolumeState("valid-restored"), snapshotState("valid-snapshot"),
	} {
		if err := k8s.Create(c, obj, strict); err != nil {
			t.Errorf("%T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// What the guard rails above still allow: an export's ACL turned on, and
// the volmodes that expose no partitions to the storage node.
func TestGuardRailsAllow(t *testing.T) {
	c := ctx(t)
	v := volumeState("acl-turned-on")
	v.Spec.Export.ACLEnabled = ptr.To(false)
	if err := k8s.Create(c, v, strict); err != nil {
		t.Fatal(err)
	}
	v.Spec.Export.ACLEnabled = ptr.To(true)
	if err := k8s.Update(c, v, strict); err != nil {
		t.Errorf("aclEnabled false to true: %v", err)
	}
	// Writers on several nodes, in a volume whose class consented.
	rwx := volumeState("multi-node-writers")
	rwx.Spec.MultiNodeBlockWriters = true
	rwx.Spec.Publications = []v1alpha1.Publication{
		{NodeID: "worker-1", HostNQN: rwx.Spec.Publications[0].HostNQN, AccessMode: v1alpha1.AccessReadWriteMany},
		{NodeID: "worker-2", HostNQN: hostB, AccessMode: v1alpha1.AccessReadWriteMany},
	}
	if err := k8s.Create(c, rwx, strict); err != nil {
		t.Errorf("two ReadWriteMany publications of a consenting volume: %v", err)
	}
	psc := storageClass("multi-node-writers")
	psc.Spec.MultiNodeBlockWriters = true
	if err := k8s.Create(c, psc, strict); err != nil {
		t.Errorf("a PillarStorageClass with multiNodeBlockWriters: %v", err)
	}
	for _, mode := range []string{"dev", "none"} {
		s := zfsStore("volmode-" + mode)
		s.Spec.ZFS.Properties = map[string]string{"volmode": mode}
		if err := k8s.Create(c, s, strict); err != nil {
			t.Errorf("volmode=%s: %v", mode, err)
		}
	}
}
