package host

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the host's Prometheus series. Labels carry function names and outcomes only:
// never job ids (unbounded) and never values from payloads (they may hold secrets).
type metrics struct {
	runs        *prometheus.CounterVec
	runDuration *prometheus.HistogramVec
	queueWait   *prometheus.HistogramVec
	jailStart   prometheus.Histogram
	inFlight    *prometheus.GaugeVec
	functions   prometheus.Gauge
	refused     prometheus.Gauge
	logDropped  *prometheus.CounterVec
	// settleErrors counts the steps of ending a job that failed (see settle); each is logged too.
	settleErrors *prometheus.CounterVec
	// storeRefusing is 1 while JetStream's store refuses writes; storeResumes counts the
	// embedded server's JetStream restarts after it did (storewatch.go).
	storeRefusing prometheus.Gauge
	storeResumes  prometheus.Counter
	// flowBudgetRefused counts the steps refused their next steps by a limit: a map over its
	// target's queue: room, or a flow past --flow-max-jobs (budget.go).
	flowBudgetRefused prometheus.Counter
	// flowWaiting is the jobs this host handed back to wait for flow control (flow.go).
	flowWaiting *prometheus.GaugeVec
}

// latencyBuckets span a millisecond to about half an hour, which covers a no-op jail and an
// agent's long session alike.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 16)

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		runs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "host_runs_total", Help: "Finished runs by function and outcome (succeeded, failed, retried, handed_back, canceled, repeat_skipped, refused, stale: a later attempt held the record).",
		}, []string{"function", "outcome"}),
		runDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "host_run_duration_seconds", Help: "Wall-clock time of a run, jail included.", Buckets: latencyBuckets,
		}, []string{"function"}),
		queueWait: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "host_queue_wait_seconds", Help: "Time from a trigger being stored to its run starting.", Buckets: latencyBuckets,
		}, []string{"function"}),
		jailStart: f.NewHistogram(prometheus.HistogramOpts{
			Name: "host_jail_start_seconds", Help: "Time to lay out a job and start its process in the jail.", Buckets: latencyBuckets,
		}),
		inFlight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "host_runs_in_flight", Help: "Runs executing now.",
		}, []string{"function"}),
		functions: f.NewGauge(prometheus.GaugeOpts{
			Name: "host_functions_loaded", Help: "Functions being served.",
		}),
		refused: f.NewGauge(prometheus.GaugeOpts{
			Name: "host_functions_refused", Help: "Function files refused at the last load (see the logs for why).",
		}),
		logDropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "host_log_bytes_dropped_total", Help: "Job output bytes over the per-job log budget, not published.",
		}, []string{"function"}),
		settleErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "host_settle_errors_total", Help: "Steps of ending a job that failed, by function and step (outputs, reply, record, message, transition, superseded, stale); see the logs.",
		}, []string{"function", "step"}),
	}
	m.storeRefusing = f.NewGauge(prometheus.GaugeOpts{
		Name: "host_store_refusing_writes", Help: "1 while JetStream's store refuses writes (a full disk, max_file_store used up); /healthz says why.",
	})
	m.storeResumes = f.NewCounter(prometheus.CounterOpts{
		Name: "host_store_resumes_total", Help: "Restarts of the embedded server's JetStream after its store refused writes and its disk had room again.",
	})
	m.flowBudgetRefused = f.NewCounter(prometheus.CounterOpts{
		Name: "host_flow_limit_refusals_total", Help: "Steps that failed because their next steps would pass a limit: a map over its target's queue: room, or a flow past --flow-max-jobs.",
	})
	m.flowWaiting = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "host_flow_control_waiting", Help: "Messages this host last handed back to wait for their function's flow control (kind: limit, rate), not yet started; summed over the hosts, the messages waiting.",
	}, []string{"function", "kind"})
	return m
}
