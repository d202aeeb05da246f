package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
)

// Metrics of the Controller service. A nil *Metrics records nothing.
type Metrics struct {
	calls    *prometheus.HistogramVec
	rejected *prometheus.CounterVec
}

// NewMetrics registers the service's metrics with reg. volumes reads
// PillarVolumeStates and PillarSnapshotStates (a cached client) when
// /metrics is scraped, for the counts of volumes and snapshots by state.
func NewMetrics(reg prometheus.Registerer, volumes client.Reader) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pillar_controller_csi_operation_duration_seconds",
			Help:    "Duration of CSI Controller and Identity calls by method and gRPC code.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"method", "code"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pillar_controller_fencing_rejections_total",
			Help: "Agent calls refused by the agent's fencing, by reason: another controller or a newer operation holds the volume.",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.rejected, &volumeCollector{r: volumes}, &snapshotCollector{r: volumes}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Interceptor times every call.
func (m *Metrics) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		if m != nil {
			m.calls.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
		}
		return resp, err
	}
}

func (m *Metrics) fencingRejected(r agentv1.FencingRejection_Reason) {
	if m != nil {
		m.rejected.WithLabelValues(r.String()).Inc()
	}
}

// volumeCollector counts PillarVolumeStates by state when scraped.
type volumeCollector struct{ r client.Reader }

var volumesDesc = prometheus.NewDesc("pillar_controller_volumes", "PillarVolumeStates by state: provisioning (not yet exported), ready, published (ready with at least one publication), deleting, export_spec_missing.", []string{"state"}, nil)

func (c *volumeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- volumesDesc }

func (c *volumeCollector) Collect(ch chan<- prometheus.Metric) {
	var l v1alpha1.PillarVolumeStateList
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.r.List(ctx, &l); err != nil {
		ch <- prometheus.NewInvalidMetric(volumesDesc, err)
		return
	}
	n := map[string]float64{"provisioning": 0, "ready": 0, "published": 0, "deleting": 0, "export_spec_missing": 0}
	for _, v := range l.Items {
		switch {
		case !v.DeletionTimestamp.IsZero():
			n["deleting"]++
		case v.Spec.Export == nil:
			n["export_spec_missing"]++
		case !v.Status.Exported:
			n["provisioning"]++
		case len(v.Spec.Publications) > 0:
			n["published"]++
		default:
			n["ready"]++
		}
	}
	for st, v := range n {
		ch <- prometheus.MustNewConstMetric(volumesDesc, prometheus.GaugeValue, v, st)
	}
}

// snapshotCollector counts PillarSnapshotStates by state when scraped.
type snapshotCollector struct{ r client.Reader }

var snapshotsDesc = prometheus.NewDesc("pillar_controller_snapshots", "PillarSnapshotStates by state: pending (recorded, not confirmed by the agent yet), ready, deleting.", []string{"state"}, nil)

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) { ch <- snapshotsDesc }

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	var l v1alpha1.PillarSnapshotStateList
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.r.List(ctx, &l); err != nil {
		ch <- prometheus.NewInvalidMetric(snapshotsDesc, err)
		return
	}
	n := map[string]float64{"pending": 0, "ready": 0, "deleting": 0}
	for _, sn := range l.Items {
		switch {
		case !sn.DeletionTimestamp.IsZero():
			n["deleting"]++
		case sn.Status.ReadyToUse:
			n["ready"]++
		default:
			n["pending"]++
		}
	}
	for st, v := range n {
		ch <- prometheus.MustNewConstMetric(snapshotsDesc, prometheus.GaugeValue, v, st)
	}
}
