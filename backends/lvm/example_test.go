package lvm_test

import (
	"fmt"

	"github.com/pillar-csi/pillar-csi/backends/lvm"
)

// Most volume IDs are their LV's name; an ID that LVM would refuse gets a
// hashed name, and the tag keeps the ID.
func ExampleLVName() {
	fmt.Println(lvm.LVName("vg0", "pvc-0f8e2a"))
	fmt.Println(lvm.LVName("vg0", "snapshot-1"))
	fmt.Println(lvm.TagPrefix + "snapshot-1")
	// Output:
	// pvc-0f8e2a
	// pillar_79c6d61344be00e74b64db50b5b9639b
	// pillar-csi.io_volume-id_snapshot-1
}
