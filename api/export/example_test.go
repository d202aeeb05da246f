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
