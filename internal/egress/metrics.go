package egress

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

type metrics struct {
	decisions      *prometheus.CounterVec
	upstreamErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, log *zap.Logger) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "host_egress_decisions_total",
			Help: "Egress proxy decisions by outcome (allowed, denied) and reason; the logs name the job and host.",
		}, []string{"decision", "reason"}),
		upstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "host_egress_upstream_errors_total",
			Help: "Allowed egress connections or requests whose upstream could not be reached or failed before answering.",
		}),
	}
	if reg != nil {
		m.decisions = register(reg, m.decisions, log)
		m.upstreamErrors = register(reg, m.upstreamErrors, log)
	}
	return m
}

// register registers c, or returns the collector already registered under
// its name, so that several Proxies (tests, a restart in-process) can share
// one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *zap.Logger) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A clash with a different metric of the same name is a bug in the
		// host; counting into an unregistered collector keeps the proxy
		// working meanwhile.
		log.Error("egress: metric not registered", zap.Error(err))
	}
	return c
}

func (m *metrics) decision(allowed bool, reason string) {
	m.decisions.WithLabelValues(decisionLabel(allowed), reason).Inc()
}

func decisionLabel(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}
