package objstore

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	leaseWait  prometheus.Histogram
	bytes      *prometheus.CounterVec
	files      *prometheus.CounterVec
	cacheBytes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leaseWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "host_volume_lease_wait_seconds",
			Help:    "Time a run waited for the lease of a volume another run held.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "host_volume_bytes_transferred_total",
			Help: "File content moved between the volume store and this host (in: downloaded, out: uploaded).",
		}, []string{"direction"}),
		files: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "host_volume_files_transferred_total",
			Help: "Blobs moved between the volume store and this host (in: downloaded, out: uploaded).",
		}, []string{"direction"}),
		cacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "host_volume_cache_bytes",
			Help: "Bytes in this host's local volume blob cache.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.leaseWait = register(reg, m.leaseWait, &err)
	m.bytes = register(reg, m.bytes, &err)
	m.files = register(reg, m.files, &err)
	m.cacheBytes = register(reg, m.cacheBytes, &err)
	return m, err
}

// register registers c, or returns the collector already registered under its name, so that
// several Volumes (tests, or a host that reopens its store) can share one registry.
func register[T prometheus.Collector](reg prometheus.Registerer, c T, errp *error) T {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		if *errp == nil {
			*errp = err
		}
	}
	return c
}
