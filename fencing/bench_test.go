package fencing

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/renameio/v2"
)

const benchVolume = "pvc-0b3e4c1a-77f0-4f7e-a8a5-0c6f3fdd2b6e"

// BenchmarkAdvanceDurable measures a check-and-advance that writes its mark
// (every operation carries a newer generation), and, interleaved in the same
// loop so that both see the same disk and the same load, two baselines that
// write the same number of bytes into the same directory:
//
//   - renameio: a bare renameio.WriteFile (temporary file, fsync, rename),
//   - renameio+dirsync: the same plus the directory fsync that makes the
//     rename durable, which renameio leaves to its caller.
//
// It reports p50 and p99 of each, and the ratios of the advance to each
// baseline. ns/op is the time of one iteration, i.e. of all three writes.
// The directory is the test's temporary directory: run it with TMPDIR on the
// filesystem the agent uses to get that filesystem's figures.
func BenchmarkAdvanceDurable(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	s := openTest(b, dir, Options{})
	gen := uint64(1)
	if _, err := s.Advance(ctx, benchVolume, tok(uidA, gen)); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(s.path(benchVolume))
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, fi.Size())
	bare, synced := filepath.Join(dir, "baseline-bare"), filepath.Join(dir, "baseline-synced")
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()

	var adv, base, baseSync []time.Duration
	for b.Loop() {
		gen++
		start := time.Now()
		if _, err := s.Advance(ctx, benchVolume, tok(uidA, gen)); err != nil {
			b.Fatal(err)
		}
		adv = append(adv, time.Since(start))

		start = time.Now()
		if err := renameio.WriteFile(bare, data, 0o600, renameio.WithTempDir(dir)); err != nil {
			b.Fatal(err)
		}
		base = append(base, time.Since(start))

		start = time.Now()
		if err := renameio.WriteFile(synced, data, 0o600, renameio.WithTempDir(dir)); err != nil {
			b.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
		baseSync = append(baseSync, time.Since(start))
	}
	a50, a99 := percentiles(adv)
	r50, r99 := percentiles(base)
	s50, s99 := percentiles(baseSync)
	b.ReportMetric(float64(len(data)), "bytes/mark")
	b.ReportMetric(float64(a50.Nanoseconds()), "advance-p50-ns")
	b.ReportMetric(float64(a99.Nanoseconds()), "advance-p99-ns")
	b.ReportMetric(float64(r50.Nanoseconds()), "renameio-p50-ns")
	b.ReportMetric(float64(r99.Nanoseconds()), "renameio-p99-ns")
	b.ReportMetric(float64(s50.Nanoseconds()), "renameio+dirsync-p50-ns")
	b.ReportMetric(float64(s99.Nanoseconds()), "renameio+dirsync-p99-ns")
	b.ReportMetric(float64(a50)/float64(r50), "p50-ratio-vs-renameio")
	b.ReportMetric(float64(a99)/float64(r99), "p99-ratio-vs-renameio")
	b.ReportMetric(float64(a50)/float64(s50), "p50-ratio-vs-renameio+dirsync")
	b.ReportMetric(float64(a99)/float64(s99), "p99-ratio-vs-renameio+dirsync")
}

// BenchmarkAdvanceRetry measures a retried request (equal generation): the
// mark is read and checked, and nothing is written.
func BenchmarkAdvanceRetry(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, b.TempDir(), Options{})
	if _, err := s.Advance(ctx, benchVolume, tok(uidA, 7)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Advance(ctx, benchVolume, tok(uidA, 7)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecide measures the decision alone.
func BenchmarkDecide(b *testing.B) {
	m := active(uidA, 5, uidB, uidC)
	for b.Loop() {
		if d := Decide(m, KindMutate, tok(uidA, 6), t0, nil); !d.Accepted() {
			b.Fatal(d.Detail)
		}
	}
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}
