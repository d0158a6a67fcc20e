package bench

import (
	"context"
	"os"
	"testing"
)

// BenchmarkFreshCall is one agent.call of a jailed function served by a fresh (warm) jail, the
// host in this process: for a CPU profile of the host's side of a call
// (go test -bench FreshCall -cpuprofile), or for strace -f counting a call's processes.
func BenchmarkFreshCall(b *testing.B) {
	ctx := context.Background()
	dir, fnDir, err := functionsDir("host-bench-fresh-", pathFunctions(false))
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
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
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := settle(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
