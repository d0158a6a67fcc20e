package system_test

import (
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/jaegertest"
)

// BenchmarkTracingWarmCall calls a jailed no-op bash function with a warm jail waiting on a
// host without tracing and the same function on a host tracing to a real Jaeger, in turns, so
// that the machine's noise hits both alike; it reports the p50 of each, and the CPU time the
// test process (both hosts and NATS; the jails are children, not counted) spent per call.
//
//	go test -run '^$' -bench BenchmarkTracingWarmCall -benchtime 300x ./test/system/
func BenchmarkTracingWarmCall(b *testing.B) {
	jg := jaegertest.Start(b)
	noop := "# sandbox\n# warm: 1\necho '{}'\n"
	h := hosttest.New(b, map[string]string{"noopoff.sh": noop})
	dirB := filepath.Join(h.Dir, "functions-b")
	write(b, dirB, "noopon.sh", noop)
	h.AddHost(b, func(c *app.Config) { c.FunctionsDir, c.OTLPEndpoint = dirB, jg.OTLP })
	call := func(fn string) (time.Duration, time.Duration) {
		c0, t0 := cpu(), time.Now()
		if got := string(h.Call(fn, "{}").Data); got != "{}" {
			b.Fatalf("%s returned %s", fn, got)
		}
		return time.Since(t0), cpu() - c0
	}
	// The first calls pay for page-cache misses and the consumers' creation.
	call("noopoff")
	call("noopon")
	var off, on, offCPU, onCPU []time.Duration
	b.ResetTimer()
	for range b.N {
		d, c := call("noopoff")
		off, offCPU = append(off, d), append(offCPU, c)
		d, c = call("noopon")
		on, onCPU = append(on, d), append(onCPU, c)
	}
	b.StopTimer()
	for _, s := range []struct {
		name   string
		d, cpu []time.Duration
	}{{"off", off, offCPU}, {"on", on, onCPU}} {
		slices.Sort(s.d)
		var total time.Duration
		for _, c := range s.cpu {
			total += c
		}
		b.ReportMetric(ms(s.d[len(s.d)/2]), s.name+"-p50-ms")
		b.ReportMetric(ms(s.d[len(s.d)*99/100]), s.name+"-p99-ms")
		b.ReportMetric(ms(total/time.Duration(len(s.cpu))), s.name+"-cpu-ms/call")
	}
}

// cpu is the CPU time (user and system) this process has used so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
