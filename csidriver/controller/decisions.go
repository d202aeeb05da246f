package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/driver"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
)

// This file holds the service's rules: what a request asks for, whether a
// record allows it, and what the agent is then told. They take the record
// and the request as values and return a decision or a status error, and
// do no I/O, so decisions_test.go proves them without an API server; the
// handlers only read, call these, and write.

// DefaultCapacity is the size of a volume whose request names none.
const DefaultCapacity = 1 << 30

// volumeIDFor maps a CreateVolume name to the volume ID: the name itself
// when it is a valid volume ID (the external-provisioner's pvc-<uid>
// names are), else a digest of it, so the same name always maps to the
// same ID.
func volumeIDFor(name string) string {
	if export.ValidateVolumeID(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "vol-" + hex.EncodeToString(sum[:20])
}

// checkCapabilities refuses what pillar-csi cannot serve: access modes
// other than single-node writer, multi-node reader and multi-node writer,
// filesystems other than ext4 and xfs, and writers on several nodes for
// anything but a raw block volume whose class allows them (multiWriters:
// the PillarStorageClass's, or the record's, multiNodeBlockWriters).
func checkCapabilities(caps []*csi.VolumeCapability, multiWriters bool) error {
	if len(caps) == 0 {
		return fmt.Errorf("volume capabilities are required")
	}
	for _, c := range caps {
		mode, err := accessModeOf(c)
		if err != nil {
			return err
		}
		switch t := c.GetAccessType().(type) {
		case *csi.VolumeCapability_Block:
			if mode == v1alpha1.AccessReadWriteMany && !multiWriters {
				return errors.New(noMultiWriters)
			}
		case *csi.VolumeCapability_Mount:
			if mode == v1alpha1.AccessReadWriteMany {
				return errors.New("a filesystem volume cannot have writers on several nodes: ext4 and xfs mounted on two nodes at once overwrite each other's metadata and corrupt the filesystem; " +
					"ReadWriteMany is served for volumeMode: Block only, in a PillarStorageClass with multiNodeBlockWriters: true")
			}
			switch t.Mount.GetFsType() {
			case "", string(v1alpha1.FSTypeExt4), string(v1alpha1.FSTypeXFS):
			default:
				return fmt.Errorf("filesystem %q is not supported: use ext4 or xfs", t.Mount.GetFsType())
			}
		default:
			return fmt.Errorf("access type (block or mount) is required")
		}
	}
	return nil
}

// noMultiWriters is the refusal of a multi-node writer where the class
// did not allow it.
const noMultiWriters = "writers on several nodes (ReadWriteMany) need a PillarStorageClass with multiNodeBlockWriters: true, and a volume made in it: " +
	"the application then coordinates its writes, as on any shared disk (docs/rwx-block.md)"

// accessModeOf is the publication access mode of a capability.
func accessModeOf(c *csi.VolumeCapability) (v1alpha1.AccessMode, error) {
	switch m := c.GetAccessMode().GetMode(); m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return v1alpha1.AccessReadWriteOnce, nil
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER:
		return v1alpha1.AccessReadWriteOncePod, nil
	case csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:
		return v1alpha1.AccessReadOnlyMany, nil
	case csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return v1alpha1.AccessReadWriteMany, nil
	default:
		return "", fmt.Errorf("access mode %s is not supported: pillar-csi serves single-node writers, multi-node readers, and multi-node writers of raw block volumes", m)
	}
}

// capacityFor picks the size to create within the range: the required
// bytes, else the limit, else DefaultCapacity (capped by the limit).
func capacityFor(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, fmt.Errorf("capacity range %d..%d: negative", req, lim)
	case lim > 0 && req > lim:
		return 0, fmt.Errorf("capacity range: required %d bytes exceeds the limit %d", req, lim)
	case req > 0:
		return req, nil
	case lim > 0:
		return min(lim, DefaultCapacity), nil
	}
	return DefaultCapacity, nil
}

// fits reports whether size satisfies the range.
func fits(size int64, r *csi.CapacityRange) bool {
	return size >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || size <= r.GetLimitBytes())
}

// compatible reports whether an existing record answers a repeated
// CreateVolume: the same store and protocol, the same consent to writers
// on several nodes, and a size within the range. The access modes are not
// compared: every volume is a block device that can be published in each
// mode checkCapabilities accepts for its class, so the record does not
// keep the ones it was created with.
func compatible(v *v1alpha1.PillarVolumeState, store, proto string, multiWriters bool, r *csi.CapacityRange) error {
	switch {
	case v.Spec.MultiNodeBlockWriters != multiWriters:
		return status.Errorf(codes.AlreadyExists, "volume %s exists with multiNodeBlockWriters %v, not %v", v.Name, v.Spec.MultiNodeBlockWriters, multiWriters)
	case string(v.Spec.StoreName) != store:
		return status.Errorf(codes.AlreadyExists, "volume %s exists in store %q, not %q", v.Name, v.Spec.StoreName, store)
	case v.Spec.ProtocolName != "" && string(v.Spec.ProtocolName) != proto:
		return status.Errorf(codes.AlreadyExists, "volume %s exists with protocol %q, not %q", v.Name, v.Spec.ProtocolName, proto)
	case !fits(v.Spec.CapacityBytes, r):
		return status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, outside the requested range %d..%d",
			v.Name, v.Spec.CapacityBytes, r.GetRequiredBytes(), r.GetLimitBytes())
	}
	return nil
}

// publicationOf is the publication a ControllerPublishVolume asks for, and
// the node it names. A node ID that does not parse names no node this
// driver registered, hence NOT_FOUND (CSI: "Node does not exist").
func publicationOf(req *csi.ControllerPublishVolumeRequest) (v1alpha1.Publication, export.NodeID, error) {
	id := req.GetVolumeId()
	switch {
	case id == "":
		return v1alpha1.Publication{}, export.NodeID{}, status.Error(codes.InvalidArgument, "volume ID is required")
	case req.GetNodeId() == "":
		return v1alpha1.Publication{}, export.NodeID{}, status.Error(codes.InvalidArgument, "node ID is required")
	case req.GetVolumeCapability() == nil:
		return v1alpha1.Publication{}, export.NodeID{}, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	// The class's consent to several writers is the record's to give
	// (admit); here only what no volume can have.
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}, true); err != nil {
		return v1alpha1.Publication{}, export.NodeID{}, status.Errorf(codes.InvalidArgument, "volume %s: %v", id, err)
	}
	mode, _ := accessModeOf(req.GetVolumeCapability())
	node, err := export.ParseNodeID(req.GetNodeId())
	if err != nil {
		// The node's name alone: the error reaches the pod's events.
		msg := err.Error()
		var e *export.Error
		if errors.As(err, &e) {
			msg = e.Err.Error()
		}
		return v1alpha1.Publication{}, export.NodeID{}, status.Errorf(codes.NotFound, "node %q: %s", nodeName(req.GetNodeId()), msg)
	}
	return v1alpha1.Publication{NodeID: req.GetNodeId(), HostNQN: v1alpha1.NQN(node.HostNQN), AccessMode: mode, ReadOnly: req.GetReadonly()}, node, nil
}

// sharedHostNQN refuses a publication to a node whose host NQN another
// node presents too (cloned machine images carry /etc/nvme/hostnqn along):
// the storage node knows hosts only by NQN, so its access list could not
// keep a volume published to one of them from the others, and revoking one
// would not fence it. nodes are the cluster's CSINodes, where pillar-node
// registered its node ID; other drivers' entries do not count.
func sharedHostNQN(id string, node export.NodeID, nodes []storagev1.CSINode) error {
	var others []string
	for _, n := range nodes {
		if n.Name == node.NodeName {
			continue
		}
		for _, d := range n.Spec.Drivers {
			if d.Name != driver.Name {
				continue
			}
			if other, err := export.ParseNodeID(d.NodeID); err == nil && other.HostNQN == node.HostNQN {
				others = append(others, n.Name)
			}
		}
	}
	if len(others) == 0 {
		return nil
	}
	slices.Sort(others)
	return errorf(codes.FailedPrecondition, id, "node %s presents the NVMe host NQN of node %s (their CSINodes show it): the storage node cannot tell them apart, so a volume published to one would be open to the other; give each node its own /etc/nvme/hostnqn and /etc/nvme/hostid (docs/troubleshooting.md, \"Nodes sharing a host NQN\")",
		node.NodeName, strings.Join(others, ", "))
}

// publishable refuses a publication the record cannot take yet. A record
// that is provisioned but not exported passes: the caller finishes the
// export first.
func publishable(id string, v *v1alpha1.PillarVolumeState) error {
	switch {
	case v == nil || !v.DeletionTimestamp.IsZero():
		return errorf(codes.NotFound, id, "no such volume")
	case v.Spec.Export == nil:
		return errorf(codes.FailedPrecondition, id, "the PillarVolumeState has no export spec (ExportSpecMissing): state bindAddress, port and aclEnabled as %s", recoveryDoc)
	case !v.Status.BackendCreated:
		return errorf(codes.FailedPrecondition, id, "the volume is not provisioned yet")
	}
	return nil
}

// admit decides a publication against the record: add it (add true), or
// it is already there (add false, no error: CSI makes a repeated
// ControllerPublishVolume succeed), or it is refused. The same node with
// another mode or read-only flag is ALREADY_EXISTS (CSI: "published at
// the node ... but is incompatible with the specified volume_capability
// or readonly flag"). Readers may be many, and so may ReadWriteMany
// writers of a volume whose class allowed them, each node a publication
// of its own; any other read-write publication excludes every other one,
// and readers and ReadWriteMany writers do not mix: FAILED_PRECONDITION
// naming the node that holds it (CSI: "published at another node and does
// not have MULTI_NODE volume capability"; the Plugin SHOULD name that node
// in the message).
func admit(id string, v *v1alpha1.PillarVolumeState, want v1alpha1.Publication) (add bool, err error) {
	pubs := v.Spec.Publications
	if i := slices.IndexFunc(pubs, func(p v1alpha1.Publication) bool { return p.NodeID == want.NodeID }); i >= 0 {
		if pubs[i] != want {
			return false, status.Errorf(codes.AlreadyExists, "volume %s is published to node %s with %s (read-only %v), not %s (read-only %v)",
				id, nodeName(want.NodeID), pubs[i].AccessMode, pubs[i].ReadOnly, want.AccessMode, want.ReadOnly)
		}
		return false, nil
	}
	if want.AccessMode == v1alpha1.AccessReadWriteMany && !v.Spec.MultiNodeBlockWriters {
		return false, errorf(codes.FailedPrecondition, id, "%s", noMultiWriters)
	}
	for _, p := range pubs {
		if p.AccessMode != want.AccessMode || !shareable(p.AccessMode) {
			return false, errorf(codes.FailedPrecondition, id, "already published to node %s with %s; %s",
				nodeName(p.NodeID), p.AccessMode, exclusion(p, want))
		}
	}
	return true, nil
}

// shareable reports whether publications of mode may be many.
func shareable(mode v1alpha1.AccessMode) bool {
	return mode == v1alpha1.AccessReadOnlyMany || mode == v1alpha1.AccessReadWriteMany
}

// exclusion says why want cannot join p.
func exclusion(p, want v1alpha1.Publication) string {
	if shareable(p.AccessMode) && shareable(want.AccessMode) {
		return fmt.Sprintf("a volume is published %s or %s, not both at once: unpublish it there first", p.AccessMode, want.AccessMode)
	}
	return fmt.Sprintf("a %s volume is published to one node at a time: unpublish it there first", modeOf(p, want))
}

// nodeName is the node name of a publication's node ID (NODE/HOST-NQN):
// what messages and events name. They reach places tenants read (a
// claim's and a pod's events, a VolumeAttachment's error), and a host NQN,
// which identifies a worker to the storage node without authenticating
// it, stays out of them; operators find it in the record's publications
// and the node's CSINode.
func nodeName(nodeID string) string {
	name, _, _ := strings.Cut(nodeID, export.NodeIDSeparator)
	return name
}

// modeOf is the mode that makes two publications exclusive: the one that
// cannot be shared.
func modeOf(p, want v1alpha1.Publication) v1alpha1.AccessMode {
	if !shareable(p.AccessMode) {
		return p.AccessMode
	}
	return want.AccessMode
}

// aclEnabled reports whether the export admits only the allowed hosts; a
// record without an export spec has no export to change.
func aclEnabled(v *v1alpha1.PillarVolumeState) bool {
	return v.Spec.Export != nil && *v.Spec.Export.ACLEnabled
}

// unpublication is what a ControllerUnpublishVolume does to a record.
type unpublication struct {
	// gone are the publications removed, keep the ones left.
	gone, keep []v1alpha1.Publication
	// deny are the host NQNs taken off the export's allowed hosts, each
	// once: those of gone that no publication in keep still has (a node
	// that keeps another publication keeps its access), and none when
	// host ACLs are off.
	deny []string
}

// unpublish decides an unpublication of nodeID; an empty nodeID is every
// node (CSI: "If the value is unset, the SP MUST unpublish the volume
// from all nodes it is published to").
func unpublish(v *v1alpha1.PillarVolumeState, nodeID string) unpublication {
	var u unpublication
	u.keep = v.Spec.Publications[:0:0]
	for _, p := range v.Spec.Publications {
		if nodeID == "" || p.NodeID == nodeID {
			u.gone = append(u.gone, p)
		} else {
			u.keep = append(u.keep, p)
		}
	}
	if !aclEnabled(v) {
		return u
	}
	for _, p := range u.gone {
		if !shared(u.keep, p.HostNQN) && !slices.Contains(u.deny, string(p.HostNQN)) {
			u.deny = append(u.deny, string(p.HostNQN))
		}
	}
	return u
}

// shared reports whether another publication uses the same host NQN.
func shared(pubs []v1alpha1.Publication, nqn v1alpha1.NQN) bool {
	return slices.ContainsFunc(pubs, func(p v1alpha1.Publication) bool { return p.HostNQN == nqn })
}

// storeRef is a PillarStore and the store an agent is told about.
type storeRef struct {
	obj   *v1alpha1.PillarStore
	proto *agentv1.Store
}

// storesOn are the stores of agentName that an agent can be told about,
// by name.
func storesOn(stores []v1alpha1.PillarStore, agentName string) map[v1alpha1.ObjectName]storeRef {
	byName := map[v1alpha1.ObjectName]storeRef{}
	for i := range stores {
		if st := &stores[i]; string(st.Spec.AgentName) == agentName {
			if p := agentclient.StoreFor(st); p != nil {
				byName[v1alpha1.ObjectName(st.Name)] = storeRef{obj: st, proto: p}
			}
		}
	}
	return byName
}

// sameStore refuses (FailedPrecondition) a PillarStore that is not the one
// v was created in: the record names that store by UID, and st, of the same
// name, has another UID that no pillar-csi.io/adopt-store-uid annotation
// accepts. A record without a UID (from a release that did not record it)
// is matched by name.
func sameStore(v *v1alpha1.PillarVolumeState, st *v1alpha1.PillarStore) error {
	return storeIs("volume", v.Name, v.Spec.StoreUID, st)
}

// storeIs is sameStore for what (a volume or a snapshot) named name,
// recorded in the store of UID want.
func storeIs(what, name string, want types.UID, st *v1alpha1.PillarStore) error {
	if want == "" || st.UID == want || st.Annotations[v1alpha1.AnnotationAdoptStoreUID] == string(want) {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s %s: PillarStore %q (UID %s) is not the store the %s was created in (UID %s): "+
		"that store was deleted and this one created under its name, perhaps on another pool or node, so nothing is done through it. "+
		"If this store names the same agent and pool, annotate it: kubectl annotate pillarstore %s %s=%s (docs/troubleshooting.md, StoreReplaced)",
		what, name, st.Name, st.UID, what, want, st.Name, v1alpha1.AnnotationAdoptStoreUID, want)
}

// exported reports whether the record states an export that the agent
// was confirmed to have made.
func exported(v *v1alpha1.PillarVolumeState) bool {
	return v != nil && v.Status.Exported && v.Spec.Export != nil
}

// pushed is the store under which a recovery pushes v's export, when it
// does: v is exported in one of stores, which is the store it was created
// in (sameStore), and not being deleted (its teardown removes the export;
// pushing it back would race that).
func pushed(v *v1alpha1.PillarVolumeState, stores map[v1alpha1.ObjectName]storeRef) (*agentv1.Store, bool) {
	store, ok := stores[v.Spec.StoreName]
	if !ok || !exported(v) || !v.DeletionTimestamp.IsZero() || sameStore(v, store.obj) != nil {
		return nil, false
	}
	return store.proto, true
}

// desiredExport is a volume's export as its record states it, with the
// host NQNs of its publications when host ACLs are on: exactly the hosts
// the record allows, since the agent makes the list what it is told.
func desiredExport(v *v1alpha1.PillarVolumeState, store *agentv1.Store, tok *agentv1.FencingToken) *agentv1.DesiredExport {
	e := v.Spec.Export
	d := &agentv1.DesiredExport{FencingToken: tok, VolumeId: v.Name, Store: store, SubsystemNqn: subsystemNQN(v),
		Transport: &agentv1.DesiredExport_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: string(e.BindAddress), Port: uint32(e.Port), AclEnabled: *e.ACLEnabled}}}
	if *e.ACLEnabled {
		for _, p := range v.Spec.Publications {
			if !slices.Contains(d.AllowedHostNqns, string(p.HostNQN)) {
				d.AllowedHostNqns = append(d.AllowedHostNqns, string(p.HostNQN))
			}
		}
	}
	return d
}

// reconcileBatchBytes bounds the entries of one Reconcile request to a
// quarter of what the agent accepts: its response carries the export of
// each entry, about as large as the entry, and must fit too.
const reconcileBatchBytes = agentv1.MaxMessageSize / 4

// reconcileBatches splits a node's desired exports into Reconcile requests
// whose entries add up to at most maxBytes (an entry larger than that goes
// alone), in order; every request but the last is partial, so only the
// last sweeps the exports no entry names. An empty set is one request:
// its sweep is the whole push.
func reconcileBatches(desired []*agentv1.DesiredExport, maxBytes int) []*agentv1.ReconcileRequest {
	var out []*agentv1.ReconcileRequest
	cur, size := &agentv1.ReconcileRequest{}, 0
	for _, d := range desired {
		n := proto.Size(d) + 8 // the entry's tag and length prefix, at most
		if len(cur.Exports) > 0 && size+n > maxBytes {
			cur.Partial = true
			out = append(out, cur)
			cur, size = &agentv1.ReconcileRequest{}, 0
		}
		cur.Exports = append(cur.Exports, d)
		size += n
	}
	return append(out, cur)
}

// tally adds the agent's answers to one Reconcile batch to a recovery's
// outcome. The retained exports are those of the batch that swept (the
// last), less the ones another batch of the push named.
func tally(out *Pushed, resp *agentv1.ReconcileResponse, pushed map[string]bool) {
	for _, r := range resp.GetResults() {
		if codes.Code(r.GetCode()) == codes.OK {
			out.Restored = append(out.Restored, r.GetVolumeId())
			continue
		}
		msg := r.GetMessage()
		if rej := r.GetFencingRejection(); rej != nil {
			msg = fmt.Sprintf("fencing %s: %s", rej.GetReason(), msg)
		}
		out.Failed[r.GetVolumeId()] = fmt.Sprintf("%s: %s", codes.Code(r.GetCode()), msg)
	}
	out.Retained = slices.DeleteFunc(slices.Clone(resp.GetRetainedSubsystemNqns()), func(nqn string) bool {
		id, ok := export.VolumeIDFromNQN(nqn)
		return ok && pushed[id]
	})
	slices.Sort(out.Restored)
}
