package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkFreshCall is one agent.call of a jailed function served by a fresh (warm) jail, the
// host in this process: for a CPU profile of the host's side of a call
// (go test -bench FreshCall -cpuprofile), or for strace -f counting a call's processes. It
// reports the CPU a call costs: host-ms/op is this process's (the host, its NATS server, the
// caller), all-ms/op every process's of the benchmark (its cgroup, the jails included), when
// it can have a cgroup of its own.
func BenchmarkFreshCall(b *testing.B) {
	ctx := context.Background()
	dir, fnDir, err := functionsDir("host-bench-fresh-", pathFunctions(false))
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if g, err := joinCPUGroup(); err == nil {
		benchGroup = g
		defer func() { benchGroup = nil; g.leave() }()
	}
	h, err := startHost(ctx, dir, "fresh", fnDir, 0, 2)
	if err != nil {
		b.Fatal(err)
	}
	defer h.close()
	for _, fn := range []string{"noop", "fibo"} {
		b.Run(fn, func(b *testing.B) {
			call, err := caller(ctx, h.client, fn)
			if err != nil {
				b.Fatal(err)
			}
			settle := h.warmRefilled(fn)
			if err := settle(); err != nil {
				b.Fatal(err)
			}
			self0, all0 := selfCPU(b), groupCPU(b)
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			// The last call's replacement jail is the next call's: counted with this one's.
			if err := settle(); err != nil {
				b.Fatal(err)
			}
			per := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
			b.ReportMetric(per(selfCPU(b)-self0), "host-ms/op")
			if benchGroup != nil {
				b.ReportMetric(per(groupCPU(b)-all0), "all-ms/op")
			}
		})
	}
}

func selfCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func groupCPU(b *testing.B) time.Duration {
	d, err := ownCPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}
