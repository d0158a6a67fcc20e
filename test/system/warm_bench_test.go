package system_test

import (
	"slices"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/hosttest"
)

// BenchmarkWarmVersusCold calls a jailed no-op bash function (default network: the egress
// proxy) with a warm jail waiting, and the same function with `warm: 0`, in turns, so that the
// machine's noise hits both alike; it reports the p50 and p99 of each, in milliseconds.
//
//	go test -run '^$' -bench BenchmarkWarmVersusCold -benchtime 200x ./internal/host/
func BenchmarkWarmVersusCold(b *testing.B) {
	h := hosttest.New(b, map[string]string{
		"noopwarm.sh": "# sandbox\n# warm: 1\necho '{}'\n",
		"noopcold.sh": "# sandbox\n# warm: 0\necho '{}'\n",
	})
	call := func(fn string) time.Duration {
		t0 := time.Now()
		if got := string(h.Call(fn, "{}").Data); got != "{}" {
			b.Fatalf("%s returned %s", fn, got)
		}
		return time.Since(t0)
	}
	// The first calls pay for page-cache misses and the consumers' creation.
	call("noopwarm")
	call("noopcold")
	var warm, cold []time.Duration
	b.ResetTimer()
	for range b.N {
		warm = append(warm, call("noopwarm"))
		cold = append(cold, call("noopcold"))
	}
	b.StopTimer()
	for _, s := range []struct {
		name string
		d    []time.Duration
	}{{"warm", warm}, {"cold", cold}} {
		slices.Sort(s.d)
		b.ReportMetric(ms(s.d[len(s.d)/2]), s.name+"-p50-ms")
		b.ReportMetric(ms(s.d[len(s.d)*99/100]), s.name+"-p99-ms")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
