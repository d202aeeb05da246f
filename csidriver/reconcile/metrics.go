package reconcile

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are pillar-controller's own metrics, served on the same /metrics
// as controller-runtime's (which count reconciles, errors and work-queue
// depth per controller). A nil *Metrics records nothing.
type Metrics struct {
	agentReady    *prometheus.GaugeVec
	agentRestarts *prometheus.CounterVec
	storeBytes    *prometheus.GaugeVec
}

// NewMetrics registers the metrics with reg (controller-runtime's
// metrics.Registry in pillar-controller).
func NewMetrics(reg prometheus.Registerer, version string) (*Metrics, error) {
	m := &Metrics{
		agentReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pillar_controller_agent_ready",
			Help: "1 when the PillarAgent's Ready condition is True, else 0.",
		}, []string{"agent"}),
		agentRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pillar_controller_agent_restarts_total",
			Help: "New agent instances noticed after the first contact (agent restarts and storage-node reboots).",
		}, []string{"agent"}),
		storeBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pillar_controller_store_bytes",
			Help: "A PillarStore's capacity as its agent last reported it; kind is total or available.",
		}, []string{"store", "kind"}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pillar_controller_build_info",
		Help: "Always 1; the version label is pillar-controller's version.",
	}, []string{"version"})
	build.WithLabelValues(version).Set(1)
	for _, c := range []prometheus.Collector{m.agentReady, m.agentRestarts, m.storeBytes, build} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) setAgentReady(agent string, ready bool) {
	if m == nil {
		return
	}
	v := 0.0
	if ready {
		v = 1
	}
	m.agentReady.WithLabelValues(agent).Set(v)
}

func (m *Metrics) countRestart(agent string, first bool) {
	if m == nil {
		return
	}
	c := m.agentRestarts.WithLabelValues(agent)
	if !first {
		c.Inc()
	}
}

func (m *Metrics) forgetAgent(agent string) {
	if m == nil {
		return
	}
	m.agentReady.DeleteLabelValues(agent)
	m.agentRestarts.DeleteLabelValues(agent)
}

func (m *Metrics) setStore(store string, total, available int64) {
	if m == nil {
		return
	}
	m.storeBytes.WithLabelValues(store, "total").Set(float64(total))
	m.storeBytes.WithLabelValues(store, "available").Set(float64(available))
}

func (m *Metrics) forgetStore(store string) {
	if m == nil {
		return
	}
	m.storeBytes.DeletePartialMatch(prometheus.Labels{"store": store})
}
