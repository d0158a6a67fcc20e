package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type series struct{ c prometheus.Counter }

func mk(f promauto.Factory) *series {
	return &series{f.NewCounter(prometheus.CounterOpts{Name: "test_total", Help: "a test counter"})}
}

func TestOncePerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := Once(reg, mk), Once(reg, mk)
	if a != b {
		t.Fatal("two calls for one registry made two sets of series")
	}
	if c := Once(prometheus.NewRegistry(), mk); c == a {
		t.Fatal("another registry shares the first one's series")
	}
	if Once(nil, mk) == Once(nil, mk) {
		t.Fatal("unregistered series are shared")
	}
	a.c.Inc()
	b.c.Inc()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 2 {
		t.Fatalf("gathered %v, %v; want one counter at 2", mfs, err)
	}
}
