package agentv1_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// readOnly are the RPCs that change nothing on the node and so take no
// fencing token. Every other RPC, including any added later, must carry
// one: a new RPC that is neither listed here nor fenced fails this test.
var readOnly = map[protoreflect.Name]bool{
	"GetAgentInfo":  true,
	"GetCapacity":   true,
	"ListVolumes":   true,
	"ListExports":   true,
	"ListSnapshots": true,
}

func TestEveryMutatingRequestCarriesAFencingToken(t *testing.T) {
	svc := agentv1.File_agent_v1_agent_proto.Services().ByName("AgentService")
	if svc == nil {
		t.Fatal("no AgentService in agent.proto")
	}
	token := (&agentv1.FencingToken{}).ProtoReflect().Descriptor()
	hasToken := func(m protoreflect.MessageDescriptor) bool {
		f := m.Fields().ByName("fencing_token")
		return f != nil && f.Number() == 1 && f.Message() == token && f.Cardinality() != protoreflect.Repeated
	}
	methods := svc.Methods()
	mutating := 0
	for i := range methods.Len() {
		m := methods.Get(i)
		in := m.Input()
		if readOnly[m.Name()] {
			if hasToken(in) {
				t.Errorf("%s is listed read-only but takes a fencing token", m.Name())
			}
			continue
		}
		mutating++
		if hasToken(in) {
			continue
		}
		// A batch request (Reconcile) fences each entry: every repeated
		// message field must carry its own token.
		batch := false
		fields := in.Fields()
		for j := range fields.Len() {
			f := fields.Get(j)
			if f.Cardinality() == protoreflect.Repeated && f.Message() != nil {
				batch = true
				if !hasToken(f.Message()) {
					t.Errorf("%s: entries %s lack fencing_token = 1", m.Name(), f.Message().FullName())
				}
			}
		}
		if !batch {
			t.Errorf("%s changes the node but %s has no fencing_token = 1", m.Name(), in.FullName())
		}
	}
	if mutating != 10 {
		t.Errorf("%d mutating RPCs, want 10 (Create, Delete, Expand, Export, Unexport, AllowHost, DenyHost, Reconcile, CreateSnapshot, DeleteSnapshot)", mutating)
	}
	// A call that changes a second lifecycle carries that one's token too:
	// each content source of CreateVolume, and CreateSnapshot's source.
	sources := (&agentv1.ContentSource{}).ProtoReflect().Descriptor().Oneofs().ByName("source").Fields()
	for i := range sources.Len() {
		if m := sources.Get(i).Message(); m == nil || !hasToken(m) {
			t.Errorf("content source %s lacks fencing_token = 1", sources.Get(i).FullName())
		}
	}
	if f := (&agentv1.CreateSnapshotRequest{}).ProtoReflect().Descriptor().Fields().ByName("source_fencing_token"); f == nil || f.Message() != token {
		t.Errorf("CreateSnapshotRequest has no source_fencing_token")
	}
}
