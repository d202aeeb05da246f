package export

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseVolumeContext feeds ParseVolumeContext the contexts a CO could
// hand pillar-node: every key present or not, any value, keys of its own.
// An accepted context satisfies every documented invariant and survives
// Map and a second parse unchanged; a refused one is an *Error wrapping
// ErrInvalidVolumeContext or ErrInvalidVolumeID.
func FuzzParseVolumeContext(f *testing.F) {
	f.Add("pvc-1", "tcp", "192.0.2.10", "4420", "", true, "-1", "10", "30", "4", "128", uint8(0x1f), "csi.storage.k8s.io/pv/name", "pv-1")
	f.Add("pvc-1", "tcp", "fd00::10", "04420", "", true, "+5", "0", "65536", "1025", "15", uint8(0x1f), "pillar-csi.io/other", "x")
	f.Add("pvc-1", "tcp", "::ffff:192.0.2.10", "65535", "", true, "", "", "", "", "", uint8(0), "", "")
	f.Add("pvc-1", "tcp", "fe80::1%eth0", "4420", "", true, "", "", "", "", "", uint8(0), "", "")
	f.Add("pvc-1", "tcp", "0.0.0.0", "0", "", true, "", "", "", "", "", uint8(0), "", "")
	f.Add("pvc-1", "rdma", "192.0.2.10", "4420", "nqn.2026-01.io.pillar-csi:volume:pvc-2", false, "", "", "", "", "", uint8(0), "", "")
	f.Add("Bad_ID", "tcp", "192.0.2.10", "4420", "", true, "", "", "", "", "", uint8(0), "", "")
	f.Add("pvc-1", "tcp", " 192.0.2.10", "4420 ", "", true, "2147483648", "-2", " 1", "1\n", "0x10", uint8(0x1f), ContextTargetPort, "")
	f.Fuzz(func(t *testing.T, volumeID, transport, address, port, nqn string, ownNQN bool,
		ctrlLoss, reconnect, keepAlive, nrIO, queueSize string, present uint8, extraKey, extraValue string) {
		if ownNQN {
			nqn = SubsystemNQNPrefix + volumeID
		}
		ctx := map[string]string{
			ContextTransport: transport, ContextTargetAddress: address, ContextTargetPort: port, ContextSubsystemNQN: nqn,
		}
		for i, v := range []string{ctrlLoss, reconnect, keepAlive, nrIO, queueSize} {
			if present&(1<<i) != 0 {
				ctx[connectOptions[i].key] = v
			}
		}
		if extraKey != "" {
			ctx[extraKey] = extraValue
		}
		in := maps.Clone(ctx)

		vc, err := ParseVolumeContext(volumeID, ctx)
		if !maps.Equal(in, ctx) {
			t.Fatalf("ParseVolumeContext changed its argument: %v, now %v", in, ctx)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalidVolumeContext) && !errors.Is(err, ErrInvalidVolumeID) {
				t.Fatalf("error %v (%T) is not an *Error wrapping ErrInvalidVolumeContext or ErrInvalidVolumeID", err, err)
			}
			return
		}
		id, ferr := For(volumeID)
		switch {
		case ferr != nil:
			t.Fatalf("accepted the context of an invalid volume ID %q", volumeID)
		case vc.Transport != TransportTCP || vc.Port == 0 || vc.SubsystemNQN != id.SubsystemNQN:
			t.Fatalf("accepted %+v for volume %q", vc, volumeID)
		case !vc.Address.IsValid() || vc.Address.Zone() != "" || vc.Address.IsUnspecified():
			t.Fatalf("accepted the address %v", vc.Address)
		}
		c := vc.Connect
		for i, p := range []*int32{c.CtrlLossTimeoutSeconds, c.ReconnectDelaySeconds, c.KeepAliveTimeoutSeconds, c.NrIOQueues, c.QueueSize} {
			o := connectOptions[i]
			if _, given := ctx[o.key]; (p != nil) != given || p != nil && (*p < o.min || *p > o.max) {
				t.Fatalf("%s: %q gave %v", o.key, ctx[o.key], p)
			}
		}

		// Map is the inverse: what the controller renders the node parses
		// back to the same context, and renders the same again.
		m := vc.Map()
		for k := range m {
			if !strings.HasPrefix(k, "pillar-csi.io/") {
				t.Fatalf("Map has the key %q outside pillar-csi.io/", k)
			}
		}
		back, err := ParseVolumeContext(volumeID, m)
		if err != nil || !reflect.DeepEqual(back, vc) {
			t.Fatalf("ParseVolumeContext(Map(%+v)) = %+v, %v", vc, back, err)
		}
		if m2 := back.Map(); !maps.Equal(m2, m) {
			t.Fatalf("Map is not stable: %v, then %v", m, m2)
		}
	})
}

// FuzzNodeID checks both directions of the node ID: what FormatNodeID
// makes ParseNodeID parses back to the same two parts; what ParseNodeID
// accepts FormatNodeID makes again, byte for byte, within the CSI limit.
func FuzzNodeID(f *testing.F) {
	f.Add("worker-1.example.com", hostNQN)
	f.Add("w", "nqn.2014-08.org.x:y/z")
	f.Add("w", "nqn.2014-08.org.x:a,b=c")
	f.Add("a/b", hostNQN)
	f.Add("Worker", hostNQN)
	f.Add(strings.Repeat("a", 63)+"."+strings.Repeat("b", 63), "nqn.2014-08.com.example:"+strings.Repeat("x", 150))
	f.Add("", "")
	f.Fuzz(func(t *testing.T, name, nqn string) {
		id, ferr := FormatNodeID(name, nqn)
		if ferr != nil && !errors.Is(ferr, ErrInvalidNodeID) {
			t.Fatalf("FormatNodeID(%q, %q): %v does not wrap ErrInvalidNodeID", name, nqn, ferr)
		}
		if ferr == nil {
			n, err := ParseNodeID(id)
			if err != nil || n.NodeName != name || n.HostNQN != nqn || len(id) > MaxNodeIDLength {
				t.Fatalf("ParseNodeID(FormatNodeID(%q, %q) = %q) = %+v, %v", name, nqn, id, n, err)
			}
		}

		s := name + NodeIDSeparator + nqn
		n, perr := ParseNodeID(s)
		if perr != nil {
			if !errors.Is(perr, ErrInvalidNodeID) {
				t.Fatalf("ParseNodeID(%q): %v does not wrap ErrInvalidNodeID", s, perr)
			}
			if ferr == nil {
				t.Fatalf("FormatNodeID(%q, %q) = %q, which ParseNodeID refuses: %v", name, nqn, id, perr)
			}
			return
		}
		again, err := FormatNodeID(n.NodeName, n.HostNQN)
		if err != nil || again != s || n.String() != s {
			t.Fatalf("ParseNodeID(%q) = %+v, formatted again %q, %v", s, n, again, err)
		}
	})
}
