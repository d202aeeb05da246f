package keylock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pillar-csi/pillar-csi/api/keylock"
)

// A CSI service refuses a second call for a busy volume, naming the call
// that holds it, so the CO retries later.
func ExampleLocks_TryLock() {
	var locks keylock.Locks
	unlock, _, _ := locks.TryLock("pvc-1", "NodeStageVolume")
	defer unlock()

	if _, holder, ok := locks.TryLock("pvc-1", "NodeUnstageVolume"); !ok {
		fmt.Printf("ABORTED: %s of pvc-1 is in progress\n", holder)
	}
	// Output: ABORTED: NodeStageVolume of pvc-1 is in progress
}

// The agent waits for the holder instead, within its caller's deadline.
func ExampleLocks_Lock() {
	var locks keylock.Locks
	unlock, _, _ := locks.TryLock("pvc-1", "CreateVolume")
	defer unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := locks.Lock(ctx, "pvc-1", "ExportVolume"); err != nil {
		fmt.Println(err)
	}
	// Output: waiting for CreateVolume of "pvc-1": context deadline exceeded
}
