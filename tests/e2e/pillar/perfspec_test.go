//go:build kernel

package pillar_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// perfSpec is the external-storage suite's provisioning performance spec.
const perfSpec = "volume-lifecycle-performance should provision volumes at scale within performance constraints"

// The figures the spec logs before it judges them ("Metrics to evaluate:",
// then the Metrics struct as k8s.io/apimachinery's dump.Pretty prints
// it), each with an optional type in brackets.
var (
	perfAvgLatency = regexp.MustCompile(`AvgLatency:\s*(?:\(time\.Duration\)\s*)?([0-9][0-9a-zµ.]*)`)
	perfThroughput = regexp.MustCompile(`Throughput:\s*(?:\(float64\)\s*)?([0-9][0-9.e+-]*)`)
)

// TestProvisioningAtScale runs the external-storage suite's
// volume-lifecycle-performance spec, 300 claims at once held to the
// average latency and throughput upstream requires of its hostpath driver
// (testdata/external-driver.yaml), for the floor driver first and then
// for pillar-csi, in one cluster boot, and logs both drivers' figures
// with their ratio. The spec failing for pillar-csi fails the test,
// unless it failed for the floor driver too: then the guest itself cannot
// meet upstream's figures, and the test says so and reports both.
func TestProvisioningAtScale(t *testing.T) {
	c := setup(t)
	installFloor(t, c)
	type figures struct {
		avg        time.Duration
		throughput float64
		failed     bool
	}
	got := map[string]figures{}
	for _, d := range []struct{ name, file string }{
		{floorDriver, "floor-driver.yaml"},
		{"pillar-csi.io", "external-driver.yaml"},
	} {
		res := runExternal(t, c, externalRun{
			driverFile: filepath.Join(lab.root, "tests", "e2e", "pillar", "testdata", d.file),
			focus:      regexp.QuoteMeta("External Storage [Driver: "+d.name+"] ") + ".*" + regexp.QuoteMeta(perfSpec),
			skip:       externalDefaultSkip,
			timeout:    90 * time.Minute,
		})
		if len(res.selected) != 1 || len(res.passed)+len(res.failed) != 1 {
			t.Fatalf("%s: the spec selected %d times, %d passed, %d failed; want it to run once", d.name, len(res.selected), len(res.passed), len(res.failed))
		}
		f := figures{failed: len(res.failed) > 0}
		// The baseline is logged before, the measured figures after this.
		_, measured, ok := strings.Cut(res.log, "Metrics to evaluate:")
		avg, thr := perfAvgLatency.FindStringSubmatch(measured), perfThroughput.FindStringSubmatch(measured)
		if !ok || avg == nil || thr == nil {
			t.Fatalf("%s: the spec logged no figures (AvgLatency %q, Throughput %q)", d.name, avg, thr)
		}
		var err error
		if f.avg, err = parseSpecDuration(avg[1]); err != nil {
			t.Fatalf("%s: AvgLatency %q: %v", d.name, avg[1], err)
		}
		if f.throughput, err = strconv.ParseFloat(thr[1], 64); err != nil {
			t.Fatalf("%s: Throughput %q: %v", d.name, thr[1], err)
		}
		record(t, d.name+": 300 claims, average created → Bound", f.avg)
		t.Logf("measured: %s: 300 claims, %.3f claims/s, the spec %s", d.name, f.throughput, map[bool]string{true: "failed", false: "passed"}[f.failed])
		got[d.name] = f
		if f.failed && d.name == "pillar-csi.io" {
			for _, r := range res.failed {
				t.Logf("pillar-csi.io: %s", r.reason)
			}
		}
	}
	floor, pillar := got[floorDriver], got["pillar-csi.io"]
	t.Logf("measured: volume-lifecycle-performance, pillar-csi ÷ floor: average latency %.2f×, throughput %.2f×",
		pillar.avg.Seconds()/floor.avg.Seconds(), pillar.throughput/floor.throughput)
	switch {
	case pillar.failed && floor.failed:
		t.Logf("the spec failed for the floor driver too: this guest cannot meet upstream's figures for any driver (floor %s, %.3f claims/s; pillar-csi %s, %.3f claims/s)",
			floor.avg, floor.throughput, pillar.avg, pillar.throughput)
	case pillar.failed:
		t.Errorf("the spec failed for pillar-csi (%s average, %.3f claims/s) and passed for the floor driver (%s, %.3f claims/s)",
			pillar.avg, pillar.throughput, floor.avg, floor.throughput)
	}
}

// parseSpecDuration reads a time.Duration as dump.Pretty prints it: Go's
// duration syntax, or nanoseconds.
func parseSpecDuration(s string) (time.Duration, error) {
	s = strings.TrimRight(s, ",")
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("not a duration: %w", err)
	}
	return d, nil
}
