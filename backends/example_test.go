package backends_test

import (
	"fmt"

	"github.com/pillar-csi/pillar-csi/backends"
)

// A thin pool of 10 GiB with 8 GiB of thin volumes in it, under the
// default rule (no overcommit) and with a ratio of 1.5.
func ExampleAvailable() {
	const GiB = 1 << 30
	fmt.Println(backends.Available(10*GiB, 8*GiB, 1) / GiB)
	fmt.Println(backends.Available(10*GiB, 8*GiB, 1.5) / GiB)
	// Output:
	// 2
	// 7
}

// Sizes are rounded up to the store's allocation unit, here an LVM extent
// of 4 MiB.
func ExampleRoundUp() {
	size, err := backends.RoundUp(10_000_000, 4<<20)
	fmt.Println(size, err)
	_, err = backends.RoundUp(0, 4<<20)
	fmt.Println(err)
	// Output:
	// 12582912 <nil>
	// invalid argument: size 0 bytes: must be positive
}
