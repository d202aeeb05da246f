package metricsdoc

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type constCollector struct{ desc *prometheus.Desc }

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, "x")
}

type silentCollector struct{ desc *prometheus.Desc }

func (c silentCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (silentCollector) Collect(chan<- prometheus.Metric)      {}

func TestDescribe(t *testing.T) {
	var rec Recorder
	rec.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "p", Name: "calls_total", Help: "Calls | by code."}, []string{"code", "method"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "p_duration_seconds", Help: "Duration."}, []string{"method"}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "p_build_info", Help: `Always "1".`, ConstLabels: prometheus.Labels{"version": "v"}}, func() float64 { return 1 }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "p_restored_total", Help: "Restored."}, func() float64 { return 0 }),
		constCollector{prometheus.NewDesc("p_volumes", "Volumes by state.", []string{"state"}, nil)},
		collectors.NewGoCollector(),
	)
	if err := rec.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "p_ready", Help: "Ready."})); err != nil {
		t.Fatal(err)
	}
	ms, err := Describe(rec.Collectors...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Metric{
		"p_calls_total":      {Name: "p_calls_total", Type: "counter", Help: "Calls | by code.", Labels: []string{"code", "method"}},
		"p_duration_seconds": {Name: "p_duration_seconds", Type: "histogram", Help: "Duration.", Labels: []string{"method"}},
		"p_build_info":       {Name: "p_build_info", Type: "gauge", Help: `Always "1".`, Labels: []string{"version"}},
		"p_restored_total":   {Name: "p_restored_total", Type: "counter", Help: "Restored."},
		"p_volumes":          {Name: "p_volumes", Type: "gauge", Help: "Volumes by state.", Labels: []string{"state"}},
		"p_ready":            {Name: "p_ready", Type: "gauge", Help: "Ready."},
	}
	seen := 0
	for i, m := range ms {
		if i > 0 && ms[i-1].Name >= m.Name {
			t.Errorf("not sorted: %s after %s", m.Name, ms[i-1].Name)
		}
		w, ok := want[m.Name]
		if !ok {
			if !strings.HasPrefix(m.Name, "go_") {
				t.Errorf("unexpected metric %+v", m)
			}
			continue
		}
		seen++
		if m.Type != w.Type || m.Help != w.Help || strings.Join(m.Labels, ",") != strings.Join(w.Labels, ",") {
			t.Errorf("%s: got %+v, want %+v", m.Name, m, w)
		}
	}
	if seen != len(want) {
		t.Errorf("described %d of our %d metrics: %+v", seen, len(want), ms)
	}

	var b bytes.Buffer
	if err := Write(&b, "pillar-test", ms, "p_"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{
		"# Metrics of pillar-test",
		"| `p_calls_total` | counter | `code`, `method` | Calls \\| by code. |",
		"| `p_ready` | gauge | — | Ready. |",
		"Besides these, the metrics of the Go runtime",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("the reference lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "| `go_") {
		t.Errorf("the reference lists a metric outside the prefixes:\n%s", out)
	}
}

func TestDescribeRefuses(t *testing.T) {
	d := prometheus.NewDesc("p_x", "X.", nil, nil)
	if _, err := Describe(silentCollector{d}); err == nil || !strings.Contains(err.Error(), "no type") {
		t.Errorf("a collector that collects nothing: %v, want an error saying it has no type", err)
	}
	if _, err := Describe(constCollector{prometheus.NewDesc("p_v", "V.", []string{"state"}, nil)}, constCollector{prometheus.NewDesc("p_v", "V.", []string{"state"}, nil)}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("one metric from two collectors: %v, want an error", err)
	}
	if new(Recorder).Unregister(silentCollector{d}) {
		t.Error("Unregister reported true")
	}
}
