package egress

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/agenthost/host/internal/metrics"
)

type proxyMetrics struct {
	decisions      *prometheus.CounterVec
	upstreamErrors prometheus.Counter
}

// newMetrics returns the egress proxies' series in reg, shared by every Proxy of one registry
// (tests, a restart in-process).
func newMetrics(reg prometheus.Registerer) *proxyMetrics {
	return metrics.Once(reg, func(f promauto.Factory) *proxyMetrics {
		return &proxyMetrics{
			decisions: f.NewCounterVec(prometheus.CounterOpts{
				Name: "host_egress_decisions_total",
				Help: "Egress proxy decisions by outcome (allowed, denied) and reason; the logs name the job and host.",
			}, []string{"decision", "reason"}),
			upstreamErrors: f.NewCounter(prometheus.CounterOpts{
				Name: "host_egress_upstream_errors_total",
				Help: "Allowed egress connections or requests whose upstream could not be reached or failed before answering.",
			}),
		}
	})
}

func (m *proxyMetrics) decision(allowed bool, reason string) {
	m.decisions.WithLabelValues(decisionLabel(allowed), reason).Inc()
}

func decisionLabel(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}
