package fencing_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pillar-csi/pillar-csi/fencing"
)

// A storage agent checks and advances the volume's mark before every change.
// Stale requests are refused; deleting the volume ends its lifecycle, after
// which only a new lifecycle (a new PillarVolumeState UID) is admitted.
func Example() {
	dir, err := os.MkdirTemp("", "generations")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := fencing.Open(ctx, dir, fencing.Options{}) // fencing.DefaultDir on a storage node
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	const volume = "pvc-0b3e4c1a-77f0-4f7e-a8a5-0c6f3fdd2b6e"
	first := fencing.Token{UID: "2d7d0a1b-0001", Generation: 3}
	show := func(what string, m *fencing.Mark, err error) {
		if err != nil {
			fmt.Printf("%-28s refused: %v\n", what, fencing.RejectionReason(err))
			return
		}
		fmt.Printf("%-28s accepted: %v\n", what, m)
	}

	m, err := store.Advance(ctx, volume, first)
	show("publish at generation 3", m, err)
	m, err = store.Advance(ctx, volume, fencing.Token{UID: first.UID, Generation: 2})
	show("stale publish (2)", m, err)
	m, err = store.Advance(ctx, volume, fencing.Token{})
	show("request without a token", m, err)
	m, err = store.End(ctx, volume, fencing.Token{UID: first.UID, Generation: 4})
	show("delete at generation 4", m, err)
	m, err = store.Advance(ctx, volume, fencing.Token{UID: first.UID, Generation: 5})
	show("old lifecycle publishes", m, err)
	m, err = store.Advance(ctx, volume, fencing.Token{UID: "2d7d0a1b-0002", Generation: 0})
	show("new lifecycle creates", m, err)

	// Output:
	// publish at generation 3      accepted: active "2d7d0a1b-0001"@3
	// stale publish (2)            refused: STALE_GENERATION
	// request without a token      refused: MISSING_TOKEN
	// delete at generation 4       accepted: ended "2d7d0a1b-0001"@4 ended: "2d7d0a1b-0001"
	// old lifecycle publishes      refused: LIFECYCLE_ENDED
	// new lifecycle creates        accepted: active "2d7d0a1b-0002"@0 ended: "2d7d0a1b-0001"
}

// Decide is the decision table as a pure function; Rule names the row of the
// table in the package documentation.
func ExampleDecide() {
	mark := &fencing.Mark{Phase: fencing.PhaseActive, UID: "uid-a", Generation: 5}
	for _, tok := range []fencing.Token{
		{UID: "uid-a", Generation: 4},
		{UID: "uid-a", Generation: 5},
		{UID: "uid-a", Generation: 6},
		{UID: "uid-b", Generation: 9},
	} {
		d := fencing.Decide(mark, fencing.KindMutate, tok, time.Now(), nil)
		fmt.Printf("%v: rule %d, %v, write=%v\n", tok, d.Rule, d.Reason, d.Changed)
	}
	// Output:
	// "uid-a"@4: rule 7, STALE_GENERATION, write=false
	// "uid-a"@5: rule 8, ACCEPTED, write=false
	// "uid-a"@6: rule 8, ACCEPTED, write=true
	// "uid-b"@9: rule 11, LIFECYCLE_REPLACED, write=false
}

// Any volume ID maps to a safe file name, and back.
func ExampleFileName() {
	for _, id := range []string{"pvc-1", "../etc/passwd", "PVC_1"} {
		name, _ := fencing.FileName(id)
		back, _ := fencing.VolumeIDFromFileName(name)
		fmt.Printf("%-15q -> %-28s -> %q\n", id, name, back)
	}
	// Output:
	// "pvc-1"         -> v.pvc-1                      -> "pvc-1"
	// "../etc/passwd" -> v._2e_2e_2fetc_2fpasswd      -> "../etc/passwd"
	// "PVC_1"         -> v._50_56_43_5f1              -> "PVC_1"
}

// Tombstones of deleted volumes are retired after a grace period; their
// lifecycles stay refused through the store's ledger.
func ExampleStore_Retire() {
	dir, err := os.MkdirTemp("", "generations")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	store, err := fencing.Open(ctx, dir, fencing.Options{Now: func() time.Time { return now }})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	old := fencing.Token{UID: "uid-deleted", Generation: 1}
	if _, err := store.End(ctx, "pvc-gone", old); err != nil {
		log.Fatal(err)
	}
	now = now.Add(48 * time.Hour)
	retired, err := store.Retire(ctx, fencing.RetireOptions{Grace: 24 * time.Hour})
	fmt.Println("retired:", retired, err)

	m, _ := store.Get(ctx, "pvc-gone")
	fmt.Println("mark:", m)
	_, err = store.Advance(ctx, "pvc-gone", old)
	fmt.Println("old lifecycle:", fencing.RejectionReason(err))
	// Output:
	// retired: [pvc-gone] <nil>
	// mark: <nil>
	// old lifecycle: LIFECYCLE_ENDED
}
