package host_test

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/hosttest"
)

// BenchmarkLimitOverhead measures what `limit:` adds to a call, side by side in one run: the
// same no-op function with and without `limit: 4 per args.repo`, called in alternating blocks
// through agent.call on one engine (no jail, so the difference is the limit's alone). It reports
// each one's p50 and the process's CPU per call (server, host and caller together).
//
//	go test ./internal/host -run '^$' -bench LimitOverhead -benchtime 2000x
func BenchmarkLimitOverhead(b *testing.B) {
	h := hosttest.NewEngine(b, map[string]string{
		"plain.sh":   "echo\n",
		"limited.sh": "# limit: 4 per args.repo\necho\n",
	}, hosttest.NewRuns())
	for _, fn := range []string{"plain", "limited"} {
		h.Call(fn, `{"repo":"acme/api"}`) // warm: consumers, buckets, connections
	}
	lat := map[string][]time.Duration{}
	cpu := map[string]time.Duration{}
	const block = 50
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		for _, fn := range []string{"plain", "limited"} {
			before := cpuTime()
			for i := range block {
				start := time.Now()
				if r := h.Call(fn, fmt.Sprintf(`{"repo":"acme/r%d"}`, i%8)); r.Header.Get("Job-Status") != "succeeded" {
					b.Fatalf("%s: %s %s", fn, r.Header.Get("Job-Status"), r.Data)
				}
				lat[fn] = append(lat[fn], time.Since(start))
			}
			cpu[fn] += cpuTime() - before
		}
	}
	b.StopTimer()
	for _, fn := range []string{"plain", "limited"} {
		d := lat[fn]
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50_ms_"+fn)
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99_ms_"+fn)
		b.ReportMetric(float64(cpu[fn].Microseconds())/1000/float64(len(d)), "cpu_ms/call_"+fn)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
