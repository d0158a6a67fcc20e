// Package bench measures the host against its floor, side by side in one run: the bare start
// of the jail the host builds for a no-op bash function, and the same function called through
// the host end to end (agent.call over an embedded NATS server).
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/runner"
)

// Options size the benchmark.
type Options struct {
	// N is the number of runs per measurement.
	N int
	// Parallel is the number of concurrent callers for the throughput measurements.
	Parallel int
	// Progress receives a line per phase; nil discards.
	Progress io.Writer
}

// Stats summarise one measurement.
type Stats struct {
	Name     string
	N        int
	P50, P99 time.Duration
	Rate     float64 // runs per second at Parallel
}

// noop is the function measured: jailed bash doing nothing.
const noop = "# sandbox\ntrue\n"

// Run performs the benchmark and returns the floor and the host's numbers.
func Run(ctx context.Context, o Options) (floor, hosted Stats, err error) {
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	dir, err := os.MkdirTemp("", "host-bench-")
	if err != nil {
		return floor, hosted, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // the jail user traverses into data/
		return floor, hosted, err
	}
	fnDir := filepath.Join(dir, "functions")
	if err := os.MkdirAll(fnDir, 0o755); err != nil {
		return floor, hosted, err
	}
	if err := os.WriteFile(filepath.Join(fnDir, "noop.sh"), []byte(noop), 0o644); err != nil {
		return floor, hosted, err
	}

	log := zap.NewNop()
	srv, err := bus.StartServer(bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, "nats")}, log)
	if err != nil {
		return floor, hosted, err
	}
	defer srv.Shutdown()
	nc, err := bus.Connect(ctx, bus.ConnectOptions{InProcess: srv, Name: "bench-host"}, log)
	if err != nil {
		return floor, hosted, err
	}
	defer nc.Close()
	h, err := host.New(host.Config{FunctionsDir: fnDir, DataDir: filepath.Join(dir, "data"), Concurrency: o.Parallel}, nc, log, prometheus.NewRegistry())
	if err != nil {
		return floor, hosted, err
	}
	if err := h.Start(ctx); err != nil {
		return floor, hosted, err
	}
	defer h.Shutdown(context.Background())

	fmt.Fprintf(progress, "bare jail: %d sequential starts, then %d with %d in parallel…\n", o.N, o.N, o.Parallel)
	if floor, err = measureFloor(ctx, h.Runner(), fnDir, o); err != nil {
		return floor, hosted, err
	}
	fmt.Fprintf(progress, "host: %d sequential agent.call requests, then %d with %d in parallel…\n", o.N, o.N, o.Parallel)
	client, err := bus.Connect(ctx, bus.ConnectOptions{URL: srv.ClientURL(), Name: "bench-client"}, log)
	if err != nil {
		return floor, hosted, err
	}
	defer client.Close()
	hosted, err = measureHost(ctx, client, o)
	return floor, hosted, err
}

// measureFloor starts the very jail the host builds for the function, without the host.
func measureFloor(ctx context.Context, r *runner.Runner, fnDir string, o Options) (Stats, error) {
	fn, err := functions.LoadPath(filepath.Join(fnDir, "noop.sh"))
	if err != nil {
		return Stats{}, err
	}
	codeDir, err := fn.Snapshot(filepath.Join(filepath.Dir(fnDir), "data", "functions"))
	if err != nil {
		return Stats{}, err
	}
	spec, jail, cleanup, err := r.Prepare(&runner.Job{ID: "bench", FlowID: "bench", Fn: fn, CodeDir: codeDir, Payload: []byte("{}")})
	if err != nil {
		return Stats{}, err
	}
	defer cleanup()
	run := func() error {
		s := *spec // each start gets its own stdin; the job directory is shared, as a no-op leaves it untouched
		s.Stdin, s.Stdout, s.Stderr = bytes.NewReader([]byte("{}")), io.Discard, io.Discard
		res, err := jail.Run(ctx, &s)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("bare jail exited %d", res.ExitCode)
		}
		return nil
	}
	return measure(ctx, "bare jail start", o, run)
}

// measureHost calls the function through agent.call, as a user would.
func measureHost(ctx context.Context, nc *nats.Conn, o Options) (Stats, error) {
	call := func() error {
		reply, err := nc.RequestWithContext(ctx, bus.CallSubject("noop"), []byte("{}"))
		if err != nil {
			return err
		}
		if st := reply.Header.Get("Job-Status"); st != "succeeded" {
			return fmt.Errorf("call failed (%s): %s", st, reply.Data)
		}
		return nil
	}
	// One call first, so that consumer and connection set-up is not in the numbers.
	if err := call(); err != nil {
		return Stats{}, err
	}
	return measure(ctx, "host agent.call", o, call)
}

// measure times o.N sequential calls of fn for latency, then o.N calls spread over o.Parallel
// workers for throughput.
func measure(ctx context.Context, name string, o Options, fn func() error) (Stats, error) {
	lat := make([]time.Duration, 0, o.N)
	for range o.N {
		t := time.Now()
		if err := fn(); err != nil {
			return Stats{}, fmt.Errorf("%s: %w", name, err)
		}
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	st := Stats{Name: name, N: o.N, P50: lat[len(lat)/2], P99: lat[min(len(lat)-1, len(lat)*99/100)]}

	var left atomic.Int64
	left.Store(int64(o.N))
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range o.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				if err := fn(); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return Stats{}, fmt.Errorf("%s: %w", name, firstErr)
	}
	st.Rate = float64(o.N) / time.Since(start).Seconds()
	return st, nil
}

// Report prints the two measurements and how the host compares to its floor.
func Report(w io.Writer, floor, hosted Stats, parallel int) {
	fmt.Fprintf(w, "%-18s %8s %10s %10s %14s\n", "measurement", "runs", "p50", "p99", fmt.Sprintf("rate @%d", parallel))
	for _, s := range []Stats{floor, hosted} {
		fmt.Fprintf(w, "%-18s %8d %10s %10s %12.1f/s\n", s.Name, s.N, round(s.P50), round(s.P99), s.Rate)
	}
	fmt.Fprintf(w, "host overhead at p50: %s (target: at most 2ms)\n", round(hosted.P50-floor.P50))
	fmt.Fprintf(w, "host rate / bare rate: %.0f%% (target: at least 70%%)\n", 100*hosted.Rate/floor.Rate)
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
