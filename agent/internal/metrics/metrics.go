// Package metrics holds pillar-agent's Prometheus metrics: RPC latency and
// errors by method and code (recorded by a gRPC interceptor), the volume
// and export counts (read from the server at scrape time), readiness, build
// information, the TLS certificate's expiry, and the Go runtime and process
// collectors. Everything lives in a registry of its own, so nothing a
// dependency registers globally leaks into the agent's /metrics.
package metrics

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Namespace prefixes every pillar-agent metric.
const Namespace = "pillar_agent"

// Buckets of the RPC latency histogram, in seconds: from a read-only call
// answered from memory to a zvol creation on a busy pool (the backends
// allow a command two minutes).
var rpcBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// Config says where the metrics that are read at scrape time come from.
type Config struct {
	// Version and NodeName label pillar_agent_build_info.
	Version, NodeName string
	// Stats returns the volume and export counts. Called at every scrape.
	Stats func() (volumes, exports int)
	// CertificateNotAfter, if set, returns when the serving certificate
	// expires; called at every scrape.
	CertificateNotAfter func() time.Time
	// ExportsRestored, if set, returns how many exports the agent put back
	// after something else removed them; called at every scrape.
	ExportsRestored func() uint64
}

// Metrics is the agent's registry and the metrics the agent updates.
type Metrics struct {
	reg      *prometheus.Registry
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	panics   *prometheus.CounterVec
	ready    prometheus.Gauge
	// collectors are everything New registered, for the reference
	// (Collectors).
	collectors []prometheus.Collector
}

// New returns the registry with every metric registered.
func New(cfg Config) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "rpc_duration_seconds",
			Help:    "Time to handle a unary gRPC call, by service, method and status code.",
			Buckets: rpcBuckets,
		}, []string{"service", "method", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "rpc_errors_total",
			Help: "Unary gRPC calls that ended with a status other than OK, by service, method and status code.",
		}, []string{"service", "method", "code"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "rpc_panics_total",
			Help: "Handler panics that were recovered and answered INTERNAL, by service and method. Any is a bug.",
		}, []string{"service", "method"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "ready",
			Help: "1 while the agent reports ready (nvmet configfs present, fencing directory writable), else 0.",
		}),
	}
	cs := []prometheus.Collector{m.duration, m.errors, m.panics, m.ready,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "build_info",
			Help:        "Always 1; the labels carry the agent's version and node.",
			ConstLabels: prometheus.Labels{"version": cfg.Version, "node": cfg.NodeName},
		}, func() float64 { return 1 }),
	}
	if cfg.Stats != nil {
		cs = append(cs, statsCollector(cfg.Stats))
	}
	if cfg.ExportsRestored != nil {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: Namespace, Name: "exports_restored_total",
			Help: "Exports the agent put back after something other than the agent removed them from nvmet (nvmetcli clear, another tool). Any means something else manages nvmet on the node.",
		}, func() float64 { return float64(cfg.ExportsRestored()) }))
	}
	if cfg.CertificateNotAfter != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "tls_certificate_expiry_timestamp_seconds",
			Help: "When the certificate the agent serves now expires (Unix time); follows rotation.",
		}, func() float64 { return float64(cfg.CertificateNotAfter().Unix()) }))
	}
	m.reg.MustRegister(cs...)
	m.collectors = cs
	return m
}

// Collectors are the collectors New registered, in order: what the
// metrics reference (docs/reference/metrics.md) is generated from.
func (m *Metrics) Collectors() []prometheus.Collector { return m.collectors }

// Registry is the agent's registry, for callers that add their own
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetReady records the outcome of the last readiness check.
func (m *Metrics) SetReady(ready bool) {
	if ready {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		// A scrape that cannot finish in time is answered with 503
		// instead of holding a connection open.
		Timeout:       10 * time.Second,
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg, // promhttp_metric_handler_errors_total
	})
}

// UnaryServerInterceptor observes every unary call's latency and, when it
// fails, counts the error.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		service, method := SplitMethod(info.FullMethod)
		code := status.Code(err).String()
		m.duration.WithLabelValues(service, method, code).Observe(time.Since(start).Seconds())
		if err != nil {
			m.errors.WithLabelValues(service, method, code).Inc()
		}
		return resp, err
	}
}

// PanicRecovered counts a recovered handler panic of fullMethod.
func (m *Metrics) PanicRecovered(fullMethod string) {
	service, method := SplitMethod(fullMethod)
	m.panics.WithLabelValues(service, method).Inc()
}

// SplitMethod splits "/pkg.Service/Method" into its service and method.
func SplitMethod(fullMethod string) (service, method string) {
	s := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "unknown", s
}

type statsCollector func() (volumes, exports int)

var (
	volumesDesc = prometheus.NewDesc(Namespace+"_volumes",
		"Backend volumes the agent knows of (live in its fencing marks at start-up, or created, listed or exported since; minus those deleted).", nil, nil)
	exportsDesc = prometheus.NewDesc(Namespace+"_exports",
		"pillar-owned nvmet subsystems on the node, as of the agent's last look at configfs.", nil, nil)
)

func (statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- volumesDesc
	ch <- exportsDesc
}

// Collect asks the server at scrape time, so the gauges can never drift
// from what the server itself counts.
func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	v, e := c()
	ch <- prometheus.MustNewConstMetric(volumesDesc, prometheus.GaugeValue, float64(v))
	ch <- prometheus.MustNewConstMetric(exportsDesc, prometheus.GaugeValue, float64(e))
}

//go:generate go run ./refgen -o ../../../docs/reference/pillar-agent-metrics.md
