package export_test

import (
	"fmt"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// The agent derives what it writes to configfs, the node what it looks for
// in sysfs; both get the same values from the volume ID.
func ExampleFor() {
	id, err := export.For("pvc-0b5a3f7e-6f1c-4f4e-9d7a-2b1c3d4e5f60")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("subsystem:", id.SubsystemNQN)
	fmt.Println("nsid:     ", id.NamespaceID)
	fmt.Println("uuid:     ", id.UUID)
	fmt.Println("nguid:    ", id.NGUID)
	// Output:
	// subsystem: nqn.2026-01.io.pillar-csi:volume:pvc-0b5a3f7e-6f1c-4f4e-9d7a-2b1c3d4e5f60
	// nsid:      1
	// uuid:      7ad685a8-adb1-5d9b-960e-9c933e59876e
	// nguid:     bc060007-1e6c-373f-2c9b-25374f67cbfb
}

// A subsystem whose NQN does not carry the pillar-csi prefix is not the
// agent's to touch.
func ExampleVolumeIDFromNQN() {
	for _, nqn := range []string{
		"nqn.2026-01.io.pillar-csi:volume:pvc-1",
		"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
	} {
		id, ok := export.VolumeIDFromNQN(nqn)
		fmt.Printf("%q %v\n", id, ok)
	}
	// Output:
	// "pvc-1" true
	// "" false
}

func ExampleValidateNQN() {
	fmt.Println(export.ValidateNQN("nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6"))
	fmt.Println(export.ValidateNQN("nqn.2014-08.org.example:a/b"))
	// Output:
	// <nil>
	// export.ValidateNQN "nqn.2014-08.org.example:a/b": invalid NQN: want nqn.yyyy-mm.reversed.domain:name, printable ASCII without spaces or '/'
}

// The node reads the volume context the controller wrote; a context for
// another volume's subsystem is refused.
func ExampleParseVolumeContext() {
	vc, err := export.ParseVolumeContext("pvc-1", map[string]string{
		export.ContextTransport:              "tcp",
		export.ContextTargetAddress:          "192.0.2.10",
		export.ContextTargetPort:             "4420",
		export.ContextSubsystemNQN:           "nqn.2026-01.io.pillar-csi:volume:pvc-1",
		export.ContextCtrlLossTimeoutSeconds: "30",
	})
	fmt.Println(vc.Address, vc.Port, *vc.Connect.CtrlLossTimeoutSeconds, err)
	_, err = export.ParseVolumeContext("pvc-2", vc.Map())
	fmt.Println(err)
	// Output:
	// 192.0.2.10 4420 30 <nil>
	// export.ParseVolumeContext "pvc-2": invalid volume context: pillar-csi.io/subsystemNQN "nqn.2026-01.io.pillar-csi:volume:pvc-1" is not the subsystem of volume "pvc-2" (want "nqn.2026-01.io.pillar-csi:volume:pvc-2")
}

func ExampleFormatNodeID() {
	id, _ := export.FormatNodeID("worker-1", "nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11")
	fmt.Println(id)
	n, _ := export.ParseNodeID(id)
	fmt.Println(n.NodeName, n.HostNQN)
	// Output:
	// worker-1/nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11
	// worker-1 nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11
}
