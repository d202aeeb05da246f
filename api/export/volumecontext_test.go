package export

import (
	"errors"
	"maps"
	"net/netip"
	"strings"
	"testing"
)

const ctxVolume = "pvc-1"

func validContext() map[string]string {
	return map[string]string{
		ContextTransport:     "tcp",
		ContextTargetAddress: "192.0.2.10",
		ContextTargetPort:    "4420",
		ContextSubsystemNQN:  SubsystemNQNPrefix + ctxVolume,
		// The CO adds keys of its own; they are not ours to judge.
		"csi.storage.k8s.io/pv/name": "pv-1",
	}
}

func TestParseVolumeContext(t *testing.T) {
	m := validContext()
	m[ContextCtrlLossTimeoutSeconds] = "-1"
	m[ContextQueueSize] = "128"
	vc, err := ParseVolumeContext(ctxVolume, m)
	if err != nil {
		t.Fatal(err)
	}
	if vc.Transport != "tcp" || vc.Address != netip.MustParseAddr("192.0.2.10") || vc.Port != 4420 ||
		vc.SubsystemNQN != SubsystemNQNPrefix+ctxVolume {
		t.Errorf("parsed %+v", vc)
	}
	if vc.Connect.CtrlLossTimeoutSeconds == nil || *vc.Connect.CtrlLossTimeoutSeconds != -1 ||
		vc.Connect.QueueSize == nil || *vc.Connect.QueueSize != 128 ||
		vc.Connect.NrIOQueues != nil || vc.Connect.ReconnectDelaySeconds != nil || vc.Connect.KeepAliveTimeoutSeconds != nil {
		t.Errorf("connect options %+v", vc.Connect)
	}
	// Map is the inverse, minus the CO's own keys.
	back := vc.Map()
	delete(m, "csi.storage.k8s.io/pv/name")
	if !maps.Equal(back, m) {
		t.Errorf("Map() = %v, want %v", back, m)
	}
	again, err := ParseVolumeContext(ctxVolume, back)
	if err != nil || again.Address != vc.Address || *again.Connect.QueueSize != 128 {
		t.Errorf("round trip: %+v, %v", again, err)
	}
}

func TestParseVolumeContextIPv6(t *testing.T) {
	m := validContext()
	m[ContextTargetAddress] = "fd00::10"
	vc, err := ParseVolumeContext(ctxVolume, m)
	if err != nil || !vc.Address.Is6() {
		t.Fatalf("%+v %v", vc, err)
	}
}

func TestParseVolumeContextRejects(t *testing.T) {
	for _, tc := range []struct {
		name, key, value, want string
		del                    bool
	}{
		{"no transport", ContextTransport, "", "transport is missing", true},
		{"rdma", ContextTransport, "rdma", `"rdma" is not supported`, false},
		{"no address", ContextTargetAddress, "", "targetAddress is missing", true},
		{"hostname", ContextTargetAddress, "storage-1", "not a unicast IP", false},
		{"unspecified", ContextTargetAddress, "0.0.0.0", "not a unicast IP", false},
		{"zone", ContextTargetAddress, "fe80::1%eth0", "not a unicast IP", false},
		{"no port", ContextTargetPort, "", "targetPort is missing", true},
		{"port 0", ContextTargetPort, "0", "not a TCP port", false},
		{"port big", ContextTargetPort, "65536", "not a TCP port", false},
		{"no nqn", ContextSubsystemNQN, "", "subsystemNQN is missing", true},
		{"other volume", ContextSubsystemNQN, SubsystemNQNPrefix + "pvc-2", "not the subsystem of volume", false},
		{"ctrl loss", ContextCtrlLossTimeoutSeconds, "-2", "ctrlLossTimeoutSeconds", false},
		{"reconnect", ContextReconnectDelaySeconds, "0", "reconnectDelaySeconds", false},
		{"kato", ContextKeepAliveTimeoutSeconds, "65536", "keepAliveTimeoutSeconds", false},
		{"queues", ContextNrIOQueues, "x", "nrIOQueues", false},
		{"qsize", ContextQueueSize, "8", "queueSize", false},
		{"unknown", "pillar-csi.io/fsType", "ext4", "unknown key(s) pillar-csi.io/fsType", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := validContext()
			if tc.del {
				delete(m, tc.key)
			} else {
				m[tc.key] = tc.value
			}
			_, err := ParseVolumeContext(ctxVolume, m)
			var e *Error
			if !errors.Is(err, ErrInvalidVolumeContext) || !errors.As(err, &e) || e.Value != ctxVolume {
				t.Fatalf("err = %v, want *Error wrapping ErrInvalidVolumeContext", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := ParseVolumeContext("Bad_ID", validContext()); !errors.Is(err, ErrInvalidVolumeID) {
		t.Errorf("bad volume ID: %v", err)
	}
	if _, err := ParseVolumeContext(ctxVolume, nil); !errors.Is(err, ErrInvalidVolumeContext) {
		t.Errorf("nil context: %v", err)
	}
}

const hostNQN = "nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11"

func TestNodeIDRoundTrip(t *testing.T) {
	id, err := FormatNodeID("worker-1.example.com", hostNQN)
	if err != nil {
		t.Fatal(err)
	}
	if id != "worker-1.example.com/"+hostNQN {
		t.Errorf("FormatNodeID = %q", id)
	}
	n, err := ParseNodeID(id)
	if err != nil || n.NodeName != "worker-1.example.com" || n.HostNQN != hostNQN {
		t.Errorf("ParseNodeID = %+v, %v", n, err)
	}
}

func TestNodeIDRejects(t *testing.T) {
	for _, tc := range []struct{ name, nodeName, nqn, want string }{
		{"empty name", "", hostNQN, "node name"},
		{"upper", "Worker", hostNQN, "node name"},
		{"slash", "a/b", hostNQN, "node name"},
		{"bad nqn", "w", "iqn.2014-08.org.x:y", "host NQN"},
		// NQNPattern allows ',' and '='; a node ID's host NQN must not
		// carry them, nor whitespace, and the error names the character.
		{"comma in nqn", "w", hostNQN + ",nqn.2014-08.org.x:evil", `host NQN contains ',' at byte 68`},
		{"equals in nqn", "w", "nqn.2014-08.org.nvmexpress:uuid=6b6f3a52", `host NQN contains '=' at byte 31`},
		{"space in nqn", "w", "nqn.2014-08.org.nvmexpress:a b", `host NQN contains whitespace ' ' at byte 28`},
		{"tab in nqn", "w", "nqn.2014-08.org.nvmexpress:a\tb", `whitespace '\t'`},
		{"newline in nqn", "w", hostNQN + "\n", `whitespace '\n'`},
		{"non-ASCII space in nqn", "w", "nqn.2014-08.org.nvmexpress:a\u00a0b", `whitespace '\u00a0'`},
		{"too long", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), "nqn.2014-08.com.example:" + strings.Repeat("x", 150), "at most 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FormatNodeID(tc.nodeName, tc.nqn)
			if !errors.Is(err, ErrInvalidNodeID) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FormatNodeID: %v, want ErrInvalidNodeID mentioning %q", err, tc.want)
			}
			_, err = ParseNodeID(tc.nodeName + "/" + tc.nqn)
			if !errors.Is(err, ErrInvalidNodeID) {
				t.Errorf("ParseNodeID: %v, want ErrInvalidNodeID", err)
			}
		})
	}
	if _, err := ParseNodeID("worker-1"); !errors.Is(err, ErrInvalidNodeID) || !strings.Contains(err.Error(), "NODE-NAME/HOST-NQN") {
		t.Errorf("ParseNodeID without separator: %v", err)
	}
}
