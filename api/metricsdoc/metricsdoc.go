// Package metricsdoc writes the reference of a binary's Prometheus
// metrics from the collectors the binary registers, so that the
// documentation (docs/reference/metrics.md), the chart's alerts and its
// dashboard can be checked against the code instead of against a list
// kept by hand. pillar-agent and pillar-controller each have a generator
// that builds their collectors as the binary does and calls Write.
package metricsdoc

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric is one metric family as a binary serves it.
type Metric struct {
	Name   string
	Type   string // counter, gauge, histogram, summary or untyped
	Help   string
	Labels []string // variable and constant label names, sorted
}

// descRE takes a Desc's name, help and label names from its String form,
// the only way client_golang shows them.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"),(?: unit: "(?:[^"\\]|\\.)*",)? constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// Describe lists the metrics of the collectors, sorted by name. A
// collector's type comes from its Go type (the vectors), or else from
// what it collects: such collectors must be able to collect (give them
// the callbacks and readers they need).
func Describe(collectors ...prometheus.Collector) ([]Metric, error) {
	byName := map[string]*Metric{}
	for _, c := range collectors {
		types, err := typesOf(c)
		if err != nil {
			return nil, err
		}
		descs := make(chan *prometheus.Desc)
		go func() {
			c.Describe(descs)
			close(descs)
		}()
		for d := range descs {
			m, err := parseDesc(d)
			if err != nil {
				return nil, err
			}
			m.Type = types[m.Name]
			if m.Type == "" {
				m.Type = types[""]
			}
			if m.Type == "" {
				return nil, fmt.Errorf("metric %s: no type: it collected nothing", m.Name)
			}
			if _, dup := byName[m.Name]; dup {
				return nil, fmt.Errorf("metric %s: described twice", m.Name)
			}
			byName[m.Name] = &m
		}
	}
	var out []Metric
	for _, m := range byName {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// typesOf returns the type of every metric c serves, by name; the empty
// name holds the type of a vector, which is all of its metrics'.
func typesOf(c prometheus.Collector) (map[string]string, error) {
	switch c.(type) {
	case *prometheus.CounterVec:
		return map[string]string{"": "counter"}, nil
	case *prometheus.GaugeVec:
		return map[string]string{"": "gauge"}, nil
	case *prometheus.HistogramVec:
		return map[string]string{"": "histogram"}, nil
	case *prometheus.SummaryVec:
		return map[string]string{"": "summary"}, nil
	}
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	types := map[string]string{}
	var err error
	for m := range ch {
		if err != nil {
			continue // drain
		}
		var pb dto.Metric
		if werr := m.Write(&pb); werr != nil {
			err = fmt.Errorf("collect %s: %w", m.Desc(), werr)
			continue
		}
		d, perr := parseDesc(m.Desc())
		if perr != nil {
			err = perr
			continue
		}
		switch {
		case pb.Counter != nil:
			types[d.Name] = "counter"
		case pb.Gauge != nil:
			types[d.Name] = "gauge"
		case pb.Histogram != nil:
			types[d.Name] = "histogram"
		case pb.Summary != nil:
			types[d.Name] = "summary"
		default:
			types[d.Name] = "untyped"
		}
	}
	return types, err
}

func parseDesc(d *prometheus.Desc) (Metric, error) {
	s := d.String()
	g := descRE.FindStringSubmatch(s)
	if g == nil {
		return Metric{}, fmt.Errorf("cannot read the metric description %s", s)
	}
	name, err := strconv.Unquote(g[1])
	if err != nil {
		return Metric{}, fmt.Errorf("metric name in %s: %w", s, err)
	}
	help, err := strconv.Unquote(g[2])
	if err != nil {
		return Metric{}, fmt.Errorf("metric help in %s: %w", s, err)
	}
	var labels []string
	for _, part := range []string{g[3], g[4]} {
		for _, l := range strings.Split(part, ",") {
			l, _, _ = strings.Cut(strings.TrimSpace(l), "=")
			if l != "" {
				labels = append(labels, l)
			}
		}
	}
	slices.Sort(labels)
	return Metric{Name: name, Help: help, Labels: labels}, nil
}

// Recorder is a prometheus.Registerer that keeps what is registered with
// it, for Describe: pass it where a binary passes its registry.
type Recorder struct {
	Collectors []prometheus.Collector
}

var _ prometheus.Registerer = (*Recorder)(nil)

// Register keeps c.
func (r *Recorder) Register(c prometheus.Collector) error {
	r.Collectors = append(r.Collectors, c)
	return nil
}

// MustRegister keeps cs.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	r.Collectors = append(r.Collectors, cs...)
}

// Unregister keeps everything (a reference lists what was ever
// registered) and reports false.
func (r *Recorder) Unregister(prometheus.Collector) bool { return false }

// Write writes the metrics as a Markdown document: a title for binary,
// then one table row per metric whose name has one of the prefixes (all
// of them if none is given), and a line naming how many others there are
// (the Go runtime's and the process's, say).
func Write(w io.Writer, binary string, ms []Metric, prefixes ...string) error {
	fmt.Fprintf(w, "# Metrics of %s\n\n<!-- Generated by make generate from the collectors %s registers; do not edit. -->\n\n", binary, binary)
	fmt.Fprintf(w, "| metric | type | labels | meaning |\n|---|---|---|---|\n")
	others := 0
	for _, m := range ms {
		if len(prefixes) > 0 && !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(m.Name, p) }) {
			others++
			continue
		}
		labels := "—"
		if len(m.Labels) > 0 {
			labels = "`" + strings.Join(m.Labels, "`, `") + "`"
		}
		help := strings.ReplaceAll(m.Help, "|", `\|`)
		fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, labels, help)
	}
	if others > 0 {
		fmt.Fprintf(w, "\nBesides these, the metrics of the Go runtime and the process (`go_*`, `process_*`) and of the libraries it uses.\n")
	}
	_, err := fmt.Fprintln(w)
	return err
}
