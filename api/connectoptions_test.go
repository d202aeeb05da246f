package api_test

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// TestConnectOptionsMirrorTheCRD backs the claim that the connect-option
// keys of the volume context mirror PillarProtocol's
// spec.nvmeofTCP.connect field by field, with the same ranges: every
// field of the generated CRD has a key named after it, every such key is
// a field, and ParseVolumeContext accepts exactly the values the API
// server admits. A field added to the CRD without a key, or a range
// changed on one side only, fails here.
func TestConnectOptionsMirrorTheCRD(t *testing.T) {
	connect := property(t, loadCRD(t, "pillarprotocols"), "spec.nvmeofTCP.connect").Properties
	if len(connect) == 0 {
		t.Fatal("no spec.nvmeofTCP.connect properties in the PillarProtocol CRD")
	}

	base := map[string]string{
		export.ContextTransport:     export.TransportTCP,
		export.ContextTargetAddress: "192.0.2.10",
		export.ContextTargetPort:    "4420",
		export.ContextSubsystemNQN:  export.SubsystemNQNPrefix + "pvc-1",
	}
	parse := func(key string, v int64) error {
		m := maps.Clone(base)
		m[key] = strconv.FormatInt(v, 10)
		_, err := export.ParseVolumeContext("pvc-1", m)
		return err
	}
	var fields []string
	for _, name := range slices.Sorted(maps.Keys(connect)) {
		fields = append(fields, name)
		s := connect[name]
		key := "pillar-csi.io/" + name
		if s.Type != "integer" || s.Format != "int32" || s.Minimum == nil {
			t.Errorf("%s: schema %s/%s, minimum %v; this test expects int32 fields with a minimum", name, s.Type, s.Format, s.Minimum)
			continue
		}
		lo, hi := int64(*s.Minimum), int64(math.MaxInt32)
		if s.Maximum != nil {
			hi = int64(*s.Maximum)
		}
		for _, v := range []int64{lo, hi} {
			if err := parse(key, v); err != nil {
				t.Errorf("%s=%d: the CRD admits it, ParseVolumeContext refuses it: %v", key, v, err)
			}
		}
		for _, v := range []int64{lo - 1, hi + 1} {
			if err := parse(key, v); err == nil {
				t.Errorf("%s=%d: the CRD refuses it, ParseVolumeContext accepts it", key, v)
			}
		}
	}

	// And the other way round: every connect key of Map is a CRD field.
	all := int32(1)
	vc, err := export.ParseVolumeContext("pvc-1", base)
	if err != nil {
		t.Fatal(err)
	}
	vc.Connect = export.ConnectOptions{
		CtrlLossTimeoutSeconds: &all, ReconnectDelaySeconds: &all, KeepAliveTimeoutSeconds: &all, NrIOQueues: &all, QueueSize: &all,
	}
	var keys []string
	for k := range vc.Map() {
		if _, ok := base[k]; !ok {
			keys = append(keys, k[len("pillar-csi.io/"):])
		}
	}
	slices.Sort(keys)
	if !slices.Equal(keys, fields) {
		t.Errorf("connect keys of the volume context %v, CRD fields %v", keys, fields)
	}
}
