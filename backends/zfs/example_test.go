package zfs_test

import (
	"errors"
	"fmt"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
)

// A store is checked when it is configured; nothing runs until a call.
func ExampleNew() {
	_, err := zfs.New(zfs.Config{Pool: "tank", ParentDataset: "pillar/volumes", Sparse: true,
		Properties: map[string]string{"compression": "lz4", "volblocksize": "16K"}})
	fmt.Println(err)
	_, err = zfs.New(zfs.Config{Pool: "tank", Properties: map[string]string{"refreservation": "none"}})
	fmt.Println(errors.Is(err, backends.ErrInvalidArgument))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// backends: configure in tank: invalid argument: property "refreservation" is set by pillar-csi and cannot be configured
}
