package v1alpha1_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// A controller increments publicationGeneration with an update that carries
// the resourceVersion it read. An update from a stale read must fail with
// Conflict: that is what keeps two controllers from issuing one generation
// twice.
func TestPublicationGenerationCASRefusesStaleRead(t *testing.T) {
	c := ctx(t)
	vs := volumeState("cas-stale")
	if err := k8s.Create(c, vs, strict); err != nil {
		t.Fatal(err)
	}
	stale := vs.DeepCopy()

	vs.Spec.PublicationGeneration++
	if err := k8s.Update(c, vs, strict); err != nil {
		t.Fatalf("increment from a fresh read: %v", err)
	}

	stale.Spec.PublicationGeneration++
	err := k8s.Update(c, stale, strict)
	if !apierrors.IsConflict(err) {
		t.Fatalf("increment from a stale read (resourceVersion %s): got %v, want Conflict", stale.ResourceVersion, err)
	}
	t.Logf("refused: %v", err)

	var got v1alpha1.PillarVolumeState
	if err := k8s.Get(c, client.ObjectKeyFromObject(vs), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.PublicationGeneration != 2 {
		t.Fatalf("publicationGeneration = %d, want 2", got.Spec.PublicationGeneration)
	}
}

// N concurrent incrementers, each retrying on Conflict, must hand out every
// generation exactly once: no two callers may both believe they own the
// same generation.
func TestConcurrentIncrementersNeverShareAGeneration(t *testing.T) {
	const (
		workers   = 8
		perWorker = 10
	)
	c := ctx(t)
	vs := volumeState("cas-concurrent")
	vs.Spec.PublicationGeneration = 0
	if err := k8s.Create(c, vs, strict); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vs)

	// Many conflicts are expected: retry fast and long rather than with
	// client-go's default five steps.
	backoff := wait.Backoff{Steps: 10000, Duration: time.Millisecond, Factor: 1, Jitter: 1}
	var (
		mu        sync.Mutex
		issued    []int64
		conflicts int
		wg        sync.WaitGroup
		errs      = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				var mine int64
				err := retry.RetryOnConflict(backoff, func() error {
					var cur v1alpha1.PillarVolumeState
					if err := k8s.Get(c, key, &cur); err != nil {
						return err
					}
					cur.Spec.PublicationGeneration++
					err := k8s.Update(c, &cur, strict)
					if apierrors.IsConflict(err) {
						mu.Lock()
						conflicts++
						mu.Unlock()
					}
					mine = cur.Spec.PublicationGeneration
					return err
				})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				issued = append(issued, mine)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("incrementer: %v", err)
	}

	slices.Sort(issued)
	for i, g := range issued {
		if g != int64(i+1) {
			t.Fatalf("generations issued: %v; want each of 1..%d exactly once", issued, workers*perWorker)
		}
	}
	var final v1alpha1.PillarVolumeState
	if err := k8s.Get(c, types.NamespacedName{Name: key.Name}, &final); err != nil {
		t.Fatal(err)
	}
	if final.Spec.PublicationGeneration != workers*perWorker {
		t.Fatalf("final publicationGeneration = %d, want %d", final.Spec.PublicationGeneration, workers*perWorker)
	}
	if conflicts == 0 {
		t.Fatalf("no update conflicted: the test did not exercise concurrent compare-and-swap")
	}
	t.Logf("%d increments by %d workers, %d conflicts retried, every generation issued once", len(issued), workers, conflicts)
}
