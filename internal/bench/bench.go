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
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/host/wire"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/runner"
	"github.com/agenthost/host/internal/sandbox"
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

// Result is one benchmark run: the floor, then the host with JetStream syncing every write
// (the default) and with a periodic sync, all measured in the same run.
type Result struct {
	Floor, Unhardened, Synced, Periodic Stats
}

// Run performs the benchmark.
func Run(ctx context.Context, o Options) (Result, error) {
	var res Result
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	dir, err := os.MkdirTemp("", "host-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // the jail user traverses into data/
		return res, err
	}
	fnDir := filepath.Join(dir, "functions")
	if err := os.MkdirAll(fnDir, 0o755); err != nil {
		return res, err
	}
	if err := os.WriteFile(filepath.Join(fnDir, "noop.sh"), []byte(noop), 0o644); err != nil {
		return res, err
	}

	synced, err := startHost(ctx, dir, "synced", fnDir, 0, o.Parallel)
	if err != nil {
		return res, err
	}
	defer synced.close()
	periodic, err := startHost(ctx, dir, "periodic", fnDir, 2*time.Minute, o.Parallel)
	if err != nil {
		return res, err
	}
	defer periodic.close()
	hardened, plain, release, err := floorStarters(ctx, synced.nc, fnDir, filepath.Join(dir, "floor"))
	if err != nil {
		return res, err
	}
	defer release()
	callSynced, err := caller(ctx, synced.client)
	if err != nil {
		return res, err
	}
	callPeriodic, err := caller(ctx, periodic.client)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "%d runs of each, in turns: the bare jail with and without hardening, the host syncing every write and every 2 minutes; then %d of each with %d in parallel…\n", o.N, o.N, o.Parallel)
	stats, err := measureTurns(ctx, o, []named{
		{"bare jail start", hardened},
		{"  (no hardening)", plain},
		{"host agent.call", callSynced},
		{"  (--nats-sync 2m)", callPeriodic},
	})
	if err != nil {
		return res, err
	}
	res.Floor, res.Unhardened, res.Synced, res.Periodic = stats[0], stats[1], stats[2], stats[3]
	return res, nil
}

// benchHost is a host on its own embedded server, and a client connected over TCP as a user's.
type benchHost struct {
	host   *host.Host
	nc     *nats.Conn // the host's
	client *nats.Conn
	closed bool
	close  func() // idempotent
}

func startHost(ctx context.Context, dir, name, fnDir string, sync time.Duration, parallel int) (*benchHost, error) {
	log := zap.NewNop()
	root := filepath.Join(dir, name)
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	srv, err := bus.StartServer(bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(root, "nats"), SyncInterval: sync}, log)
	if err != nil {
		return nil, err
	}
	b := &benchHost{}
	b.close = func() {
		if b.closed {
			return
		}
		b.closed = true
		if b.client != nil {
			b.client.Close()
		}
		if b.host != nil {
			b.host.Shutdown(context.Background())
		}
		if b.nc != nil {
			b.nc.Close()
		}
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	if b.nc, err = bus.Connect(ctx, bus.ConnectOptions{InProcess: srv, Name: "bench-host"}, log); err != nil {
		b.close()
		return nil, err
	}
	cfg := wire.Config{Config: host.Config{FunctionsDir: fnDir, DataDir: filepath.Join(root, "data"), Concurrency: parallel}}
	if b.host, err = wire.New(ctx, cfg, b.nc, log, prometheus.NewRegistry()); err != nil {
		b.close()
		return nil, err
	}
	if err := b.host.Start(ctx); err != nil {
		b.close()
		return nil, err
	}
	if b.client, err = bus.Connect(ctx, bus.ConnectOptions{URL: srv.ClientURL(), Name: "bench-client"}, log); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// jobs reads the host's job records, as a client would.
func (b *benchHost) jobs(ctx context.Context) (*jobs.Store, error) {
	js, err := jetstream.New(b.client)
	if err != nil {
		return nil, err
	}
	return jobs.Bind(ctx, js)
}

// floorStarters start the very jail the host builds for the function, without the host; and
// the same jail without its hardening (seccomp, cgroups, rlimits), to show what that costs.
// The runner is configured by the host's own wiring (on the host's connection, with a data
// directory of its own) and asked to run the function once; its jail hands over that run's
// spec, job directory laid out as for any job, and holds the run until release, so that the
// starters can start the bare jail on it as often as they like.
func floorStarters(ctx context.Context, nc *nats.Conn, fnDir, root string) (hardened, plain func() error, release func(), err error) {
	fn, err := functions.LoadPath(filepath.Join(fnDir, "noop.sh"))
	if err != nil {
		return nil, nil, nil, err
	}
	rcfg, err := wire.RunnerConfig(ctx, wire.Config{Config: host.Config{FunctionsDir: fnDir, DataDir: filepath.Join(root, "data")}}, nc, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		return nil, nil, nil, err
	}
	if rcfg.Jail == nil {
		return nil, nil, nil, rcfg.JailErr
	}
	jail := rcfg.Jail
	catcher := &specCatcher{Jail: jail, caught: make(chan *sandbox.Spec, 1), release: make(chan struct{})}
	rcfg.Jail = catcher
	r, err := runner.New(rcfg)
	if err != nil {
		return nil, nil, nil, err
	}
	gid := -1
	if os.Geteuid() == 0 {
		gid = sandbox.DefaultGID // the host's default jail group (--jail-gid), which the benchmark keeps
	}
	codeDir, err := fn.Snapshot(filepath.Join(root, "data", "functions"), gid)
	if err != nil {
		return nil, nil, nil, err
	}
	ran := make(chan *runner.Outcome, 1)
	go func() {
		ran <- r.Run(ctx, &runner.Job{ID: "bench", FlowID: "bench", Fn: fn, CodeDir: codeDir, Payload: []byte("{}")})
	}()
	var spec *sandbox.Spec
	select {
	case spec = <-catcher.caught:
	case out := <-ran:
		return nil, nil, nil, fmt.Errorf("the noop function never reached its jail: %v", out.Err)
	}
	release = func() {
		close(catcher.release)
		<-ran // the run cleans its job directory up
	}
	uid, gid := jail.Owner()
	bare, err := sandbox.NewBwrap(sandbox.Config{UID: uid, GID: gid, Unhardened: true})
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	starter := func(j sandbox.Jail, limits sandbox.Limits) func() error {
		return func() error {
			s := *spec // each start gets its own stdin; the job directory is shared, as a no-op leaves it untouched
			s.Stdin, s.Stdout, s.Stderr, s.Limits = bytes.NewReader([]byte("{}")), io.Discard, io.Discard, limits
			res, err := j.Run(ctx, &s)
			if err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return fmt.Errorf("bare jail exited %d", res.ExitCode)
			}
			return nil
		}
	}
	return starter(jail, spec.Limits), starter(bare, sandbox.Limits{}), release, nil
}

// specCatcher is the runner's jail but for the one run it is asked for: it hands that run's
// spec over and holds the run until release, without starting anything.
type specCatcher struct {
	runner.Jail
	caught  chan *sandbox.Spec
	release chan struct{}
}

func (c *specCatcher) Run(ctx context.Context, spec *sandbox.Spec) (*sandbox.Result, error) {
	c.caught <- spec
	select {
	case <-c.release:
	case <-ctx.Done():
	}
	return &sandbox.Result{}, nil
}

// named is one thing to measure.
type named struct {
	name string
	fn   func() error
}

// measureTurns times o.N sequential runs of each, taking turns run by run so that all of them
// see the same machine, then o.N runs of each spread over o.Parallel workers for throughput.
func measureTurns(ctx context.Context, o Options, all []named) ([]Stats, error) {
	lats := make([][]time.Duration, len(all))
	for range o.N {
		for i, x := range all {
			t := time.Now()
			if err := x.fn(); err != nil {
				return nil, fmt.Errorf("%s: %w", x.name, err)
			}
			lats[i] = append(lats[i], time.Since(t))
		}
	}
	out := make([]Stats, len(all))
	for i, x := range all {
		out[i] = latencyStats(x.name, lats[i])
		var err error
		if out[i].Rate, err = rate(ctx, o, x.fn); err != nil {
			return nil, fmt.Errorf("%s: %w", x.name, err)
		}
	}
	return out, nil
}

// caller returns a function that calls the no-op through agent.call, as a user would; it makes
// one call first, so that consumer and connection set-up is not in the numbers.
func caller(ctx context.Context, nc *nats.Conn) (func() error, error) {
	call := func() error {
		reply, err := nc.RequestWithContext(ctx, bus.CallSubject("noop"), []byte("{}"))
		if err != nil {
			return err
		}
		if st := reply.Header.Get(bus.HeaderJobStatus); st != "succeeded" {
			return fmt.Errorf("call failed (%s): %s", st, reply.Data)
		}
		return nil
	}
	return call, call()
}

func latencyStats(name string, lat []time.Duration) Stats {
	slices.Sort(lat)
	return Stats{Name: name, N: len(lat), P50: lat[len(lat)/2], P99: lat[min(len(lat)-1, len(lat)*99/100)]}
}

// rate runs fn o.N times over o.Parallel workers and returns runs per second.
func rate(ctx context.Context, o Options, fn func() error) (float64, error) {
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
		return 0, firstErr
	}
	return float64(o.N) / time.Since(start).Seconds(), nil
}

// Report prints the measurements and how the host compares to its floor.
func Report(w io.Writer, r Result, parallel int) {
	fmt.Fprintf(w, "%-20s %6s %10s %10s %14s\n", "measurement", "runs", "p50", "p99", fmt.Sprintf("rate @%d", parallel))
	for _, s := range []Stats{r.Floor, r.Unhardened, r.Synced, r.Periodic} {
		fmt.Fprintf(w, "%-20s %6d %10s %10s %12.1f/s\n", s.Name, s.N, round(s.P50), round(s.P99), s.Rate)
	}
	fmt.Fprintf(w, "hardening (seccomp, cgroups, rlimits) adds %.0f%% to a jailed no-op at p50 (target: at most 20%%)\n",
		100*(float64(r.Floor.P50)/float64(r.Unhardened.P50)-1))
	fmt.Fprintf(w, "host overhead at p50: %s, %s with --nats-sync 2m (target: at most 2ms)\n",
		round(r.Synced.P50-r.Floor.P50), round(r.Periodic.P50-r.Floor.P50))
	fmt.Fprintf(w, "host rate / bare rate: %.0f%%, %.0f%% with --nats-sync 2m (target: at least 70%%)\n",
		100*r.Synced.Rate/r.Floor.Rate, 100*r.Periodic.Rate/r.Floor.Rate)
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
