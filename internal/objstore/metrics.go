package objstore

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/agenthost/host/internal/metrics"
)

type volumeMetrics struct {
	leaseWait  prometheus.Histogram
	bytes      *prometheus.CounterVec
	files      *prometheus.CounterVec
	cacheBytes prometheus.Gauge
}

// newMetrics returns the volume stores' series in reg, shared by every Volumes of one registry
// (a test's several "hosts", a host that reopens its store).
func newMetrics(reg prometheus.Registerer) *volumeMetrics {
	return metrics.Once(reg, func(f promauto.Factory) *volumeMetrics {
		return &volumeMetrics{
			leaseWait: f.NewHistogram(prometheus.HistogramOpts{
				Name:    "host_volume_lease_wait_seconds",
				Help:    "Time a run waited for the lease of a volume another run held.",
				Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
			}),
			bytes: f.NewCounterVec(prometheus.CounterOpts{
				Name: "host_volume_bytes_transferred_total",
				Help: "File content moved between the volume store and this host (in: downloaded, out: uploaded).",
			}, []string{"direction"}),
			files: f.NewCounterVec(prometheus.CounterOpts{
				Name: "host_volume_files_transferred_total",
				Help: "Blobs moved between the volume store and this host (in: downloaded, out: uploaded).",
			}, []string{"direction"}),
			cacheBytes: f.NewGauge(prometheus.GaugeOpts{
				Name: "host_volume_cache_bytes",
				Help: "Bytes in this host's local volume blob cache.",
			}),
		}
	})
}
