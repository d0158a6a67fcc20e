// Package bench measures the host against its floor, side by side in one run: a plain
// bubblewrap start with every namespace (the floor), the bare start of the jail the host builds
// for a no-op bash function, and no-op functions called through the host end to end
// (agent.call over an embedded NATS server) with the default network, with `network: none` and
// unjailed. It then says where the time of one cold job goes, from the marks the runner and the
// jail record on every run (runner.Marks).
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
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

// The functions measured: bash doing nothing, jailed with the default network (the egress
// proxy) served by a warm jail (the host's default) and cold, jailed with no network (cold), and
// unjailed.
var noops = map[string]string{
	"noop.sh":        "# sandbox\ntrue\n",
	"noop-cold.sh":   "# sandbox\n# warm: 0\ntrue\n",
	"noop-none.sh":   "# sandbox\n# network: none\n# warm: 0\ntrue\n",
	"noop-direct.sh": "true\n",
}

// Result is one benchmark run, every measurement taken in the same run.
type Result struct {
	Floor        Stats // plain bwrap, every namespace, bash -c true
	Jail         Stats // the jail the host builds for noop, its init included, without the host
	JailPlain    Stats // the same without hardening (seccomp, cgroups, rlimits)
	Call         Stats // agent.call of noop: default network, a warm jail waiting
	CallCold     Stats // of noop-cold: default network, `warm: 0`
	CallPeriodic Stats // of noop on a host whose JetStream syncs every two minutes, not every write
	CallNone     Stats // of noop-none: `network: none`, `warm: 0`
	CallDirect   Stats // of noop-direct: unjailed
	Breakdown    []Stage
	BreakdownOf  int // runs the breakdown's medians are of
}

// Run performs the benchmark.
func Run(ctx context.Context, o Options) (Result, error) {
	var res Result
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	dir, fnDir, err := functionsDir("host-bench-", noops)
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	h, err := startHost(ctx, dir, "host", fnDir, 0, o.Parallel)
	if err != nil {
		return res, err
	}
	defer h.close()
	// What syncing every JetStream write (--nats-sync 0, the default) costs, against
	// JetStream's own default of a flush every two minutes.
	periodic, err := startHost(ctx, dir, "periodic", fnDir, 2*time.Minute, o.Parallel)
	if err != nil {
		return res, err
	}
	defer periodic.close()
	own, err := ownJail(ctx, h.nc, fnDir, filepath.Join(dir, "floor"))
	if err != nil {
		return res, err
	}
	defer own.release()
	var calls [4]func() error
	for i, fn := range []string{"noop", "noop-cold", "noop-none", "noop-direct"} {
		if calls[i], err = caller(ctx, h.client, fn); err != nil {
			return res, err
		}
	}
	callPeriodic, err := caller(ctx, periodic.client, "noop")
	if err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "%d runs of each, in turns: the plain bwrap floor, the host's own jail with and without hardening, agent.call with the default network (warm, and JetStream syncing every 2 minutes; cold), network: none (cold) and unjailed; then %d of each with %d in parallel…\n", o.N, o.N, o.Parallel)
	stats, err := measureTurns(ctx, o, []named{
		{"bwrap floor", floor, nil},
		{"host's jail", own.start(own.spec, true), nil},
		{"  (no hardening)", own.start(own.spec, false), nil},
		{"call, default, warm", calls[0], h.warmRefilled("noop")},
		{"  (--nats-sync 2m)", callPeriodic, periodic.warmRefilled("noop")},
		{"call, default, cold", calls[1], nil},
		{"  network: none", calls[2], nil},
		{"  unjailed", calls[3], nil},
	})
	if err != nil {
		return res, err
	}
	res.Floor, res.Jail, res.JailPlain, res.Call, res.CallPeriodic, res.CallCold, res.CallNone, res.CallDirect = stats[0], stats[1], stats[2], stats[3], stats[4], stats[5], stats[6], stats[7]

	fmt.Fprintf(progress, "where one cold job's time goes: %d runs of each part, in turns…\n", o.N)
	res.BreakdownOf = o.N
	if res.Breakdown, err = breakdown(ctx, o.N, h, own); err != nil {
		return res, err
	}
	return res, nil
}

// floorArgs is the floor: bubblewrap with every namespace, the system read-only, and nothing
// of the host's own (no cgroup, seccomp, rlimits, curated /etc, init or job directory).
func floorArgs() []string { return plainJail("/bin/bash", "-c", "true") }

// plainJail is the floor's jail running argv.
func plainJail(argv ...string) []string {
	a := []string{"--ro-bind", "/usr", "/usr"}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if target, err := os.Readlink(p); err == nil {
			a = append(a, "--symlink", target, p)
		} else if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			a = append(a, "--ro-bind", p, p)
		}
	}
	return append(append(a, "--proc", "/proc", "--dev", "/dev", "--unshare-all", "--uid", "1000", "--die-with-parent"), argv...)
}

// floor starts the plain bubblewrap jail once.
func floor() error { return runPlain(floorArgs()) }

// runPlain runs bwrap with args once.
func runPlain(args []string) error {
	out, err := exec.Command("bwrap", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("plain bwrap: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// benchHost is a host on its own embedded server, and a client connected over TCP as a user's.
type benchHost struct {
	host   *app.Host
	nc     *nats.Conn // the host's
	client *nats.Conn
	reg    *prometheus.Registry // the host's metrics
	closed bool
	close  func() // idempotent
}

func startHost(ctx context.Context, dir, name, fnDir string, sync time.Duration, parallel int, tweak ...func(*app.Config)) (*benchHost, error) {
	log := zap.NewNop()
	root := filepath.Join(dir, name)
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	srv, err := bus.StartServer(bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(root, "nats"), SyncInterval: sync}, log)
	if err != nil {
		return nil, err
	}
	b := &benchHost{reg: prometheus.NewRegistry()}
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
	cfg := app.Config{Config: host.Config{FunctionsDir: fnDir, DataDir: filepath.Join(root, "data"), Concurrency: parallel}}
	for _, tw := range tweak {
		tw(&cfg)
	}
	if b.host, err = app.New(ctx, cfg, b.nc, log, b.reg); err != nil {
		b.close()
		return nil, err
	}
	if err := b.host.Start(ctx); err != nil {
		b.close()
		return nil, err
	}
	// With a caller's inboxes, not the hosts' (bus.Connect's default): a host answers no request
	// whose reply subject is a hosts' inbox.
	client := bus.ConnectOptions{URL: srv.ClientURL(), Name: "bench-client", Options: []nats.Option{nats.CustomInboxPrefix(bus.CallersInboxPrefix)}}
	if b.client, err = bus.Connect(ctx, client, log); err != nil {
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

// jailRig is the very jail the host builds for noop, without the host: the runner is
// configured by the host's own wiring (on the host's connection, with a data directory of its
// own) and asked to run the function once; its jail hands over that run's spec, job directory
// laid out as for any job and egress socket served, and holds the run until release, so that
// the jail can be started on it as often as one likes. Later runs of the runner pass through
// to the jail.
type jailRig struct {
	ctx       context.Context
	jail      runner.Jail
	plain     sandbox.Jail // the same jail tool without hardening
	spec      *sandbox.Spec
	runner    *runner.Runner
	fn        *functions.Function
	codeDir   string
	release   func()
	runs      atomic.Int64
	initArgv0 int // where the job's own argv starts in spec.Argv, after the init's
}

func ownJail(ctx context.Context, nc *nats.Conn, fnDir, root string) (*jailRig, error) {
	fn, err := functions.LoadPath(filepath.Join(fnDir, "noop-cold.sh"))
	if err != nil {
		return nil, err
	}
	rcfg, err := app.RunnerConfig(ctx, app.Config{Config: host.Config{FunctionsDir: fnDir, DataDir: filepath.Join(root, "data")}}, nc, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	if rcfg.Jail == nil {
		return nil, rcfg.JailErr
	}
	catcher := &specCatcher{Jail: rcfg.Jail, caught: make(chan *sandbox.Spec, 1), release: make(chan struct{})}
	rig := &jailRig{ctx: ctx, jail: rcfg.Jail, fn: fn}
	rcfg.Jail = catcher
	if rig.runner, err = runner.New(rcfg); err != nil {
		return nil, err
	}
	gid := -1
	if os.Geteuid() == 0 {
		gid = sandbox.DefaultGID // the host's default jail group (--jail-gid), which the benchmark keeps
	}
	if rig.codeDir, err = fn.Snapshot(filepath.Join(root, "data", "functions"), gid); err != nil {
		return nil, err
	}
	ran := make(chan *jobtype.Outcome, 1)
	go func() { out, _ := rig.run(); ran <- out }()
	select {
	case rig.spec = <-catcher.caught:
	case out := <-ran:
		return nil, fmt.Errorf("the noop function never reached its jail: %v", out.Err)
	}
	rig.release = func() {
		close(catcher.release)
		<-ran // the run cleans its job directory up
	}
	rig.initArgv0 = slices.Index(rig.spec.Argv, "--") + 1 // 0 when there is no init
	uid, gid := rcfg.Jail.Owner()
	if rig.plain, err = sandbox.NewBwrapUnhardened(sandbox.Config{UID: uid, GID: gid}); err != nil {
		rig.release()
		return nil, err
	}
	return rig, nil
}

// run runs noop through the runner, as the host would, up to its jail's teardown: the next
// part must not share the machine with this one's teardown.
func (r *jailRig) run() (*jobtype.Outcome, runner.Marks) {
	id := fmt.Sprintf("bench-%d", r.runs.Add(1))
	return r.runner.Run(r.ctx, r.fn, r.codeDir, &jobtype.Job{ID: id, FlowID: id, Payload: []byte("{}")})
}

// withArgv is the caught spec running argv instead.
func (r *jailRig) withArgv(argv ...string) *sandbox.Spec {
	s := *r.spec
	s.Argv = argv
	return &s
}

// startOnce starts the jail once on spec, hardened or not, and returns its marks.
func (r *jailRig) startOnce(spec *sandbox.Spec, hardened bool) (sandbox.Marks, error) {
	s := *spec // each start gets its own stdin; the job directory is shared, as a no-op leaves it untouched
	s.Stdin, s.Stdout, s.Stderr = bytes.NewReader([]byte("{}")), io.Discard, io.Discard
	if s.Listen != nil {
		// The proxy address is made in each jail, as for a job; a no-op never connects, so
		// nothing serves it (the caught run's proxy is not this start's).
		s.Listen = &sandbox.Listen{Addr: s.Listen.Addr, Ready: func(l net.Listener) { l.Close() }}
	}
	var j sandbox.Jail = r.jail
	if !hardened {
		// Unhardened, bwrap gives no go-ahead to make the proxy socket before: without it.
		j, s.Limits, s.Listen = r.plain, sandbox.Limits{}, nil
	}
	res, err := sandbox.Run(r.ctx, j, &s)
	if err != nil {
		return sandbox.Marks{}, err
	}
	if res.ExitCode != 0 {
		return sandbox.Marks{}, fmt.Errorf("bare jail exited %d", res.ExitCode)
	}
	return res.Marks, nil
}

func (r *jailRig) start(spec *sandbox.Spec, hardened bool) func() error {
	return func() error {
		_, err := r.startOnce(spec, hardened)
		return err
	}
}

// specCatcher is the runner's jail but for the one run it is asked for: it hands that run's
// spec over and holds the run until release, without starting anything.
type specCatcher struct {
	runner.Jail
	caught  chan *sandbox.Spec
	release chan struct{}
	once    sync.Once
}

// ListensIn passes the jail's on: the runner wires a job's egress by it.
func (c *specCatcher) ListensIn() bool {
	j, ok := c.Jail.(interface{ ListensIn() bool })
	return ok && j.ListensIn()
}

func (c *specCatcher) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Handle, error) {
	var first bool
	c.once.Do(func() { first = true })
	if !first {
		return c.Jail.Start(ctx, spec)
	}
	c.caught <- spec
	held := heldRun(make(chan struct{}))
	go func() {
		select {
		case <-c.release:
		case <-ctx.Done():
		}
		close(held)
	}()
	return held, nil
}

// heldRun is the caught run's handle: nothing runs, and the run ends, exit code 0, once it is
// released.
type heldRun chan struct{}

func (h heldRun) Wait(ctx context.Context) <-chan *sandbox.Result {
	c := make(chan *sandbox.Result, 1)
	go func() {
		defer close(c)
		select {
		case <-h:
			c <- &sandbox.Result{}
		case <-ctx.Done():
		}
	}()
	return c
}

func (h heldRun) End(int)  {}
func (h heldRun) Kill()    {}
func (h heldRun) Destroy() { <-h }

// named is one thing to measure.
type named struct {
	name string
	fn   func() error
	// settle, when set, runs after each timed run of fn and outside its time: it waits for what
	// the run set going in the background (a warm jail's replacement), so that the next
	// measurement in the turn does not pay for it.
	settle func() error
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
			if x.settle != nil {
				if err := x.settle(); err != nil {
					return nil, fmt.Errorf("%s: %w", x.name, err)
				}
			}
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

// caller returns a function that calls fn through agent.call, as a user would; it makes one
// call first, so that consumer and connection set-up is not in the numbers.
func caller(ctx context.Context, nc *nats.Conn, fn string) (func() error, error) {
	call := func() error {
		_, err := callOnce(ctx, nc, fn)
		return err
	}
	return call, call()
}

// callOnce calls fn once and returns the reply.
func callOnce(ctx context.Context, nc *nats.Conn, fn string) (*nats.Msg, error) {
	reply, err := nc.RequestWithContext(ctx, bus.CallSubject(fn), []byte("{}"))
	if err != nil {
		return nil, err
	}
	if st := reply.Header.Get(bus.HeaderJobStatus); st != "succeeded" {
		return nil, fmt.Errorf("call of %s failed (%s): %s", fn, st, reply.Data)
	}
	return reply, nil
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

// Report prints the measurements, how the host compares to the floor, and where one cold job's
// time goes.
func Report(w io.Writer, r Result, parallel int) {
	fmt.Fprintf(w, "%-20s %6s %10s %10s %14s %9s %9s\n", "measurement", "runs", "p50", "p99", fmt.Sprintf("rate @%d", parallel), "p50/floor", "rate/floor")
	for _, s := range []Stats{r.Floor, r.Jail, r.JailPlain, r.Call, r.CallPeriodic, r.CallCold, r.CallNone, r.CallDirect} {
		fmt.Fprintf(w, "%-20s %6d %10s %10s %12.1f/s %8.2fx %8.2fx\n", s.Name, s.N, round(s.P50), round(s.P99), s.Rate,
			float64(s.P50)/float64(r.Floor.P50), s.Rate/r.Floor.Rate)
	}
	fmt.Fprintf(w, "hardening (seccomp, cgroups, rlimits) adds %.0f%% to the host's jail at p50\n",
		100*(float64(r.Jail.P50)/float64(r.JailPlain.P50)-1))
	fmt.Fprintf(w, "syncing every JetStream write adds %s to a call at p50 (against --nats-sync 2m)\n", round(r.Call.P50-r.CallPeriodic.P50))
	fmt.Fprintf(w, "warm default-network call: p50 %.2fx the floor (target: at most 0.5x), rate %.2fx the floor's (target: at least 0.8x)\n",
		float64(r.Call.P50)/float64(r.Floor.P50), r.Call.Rate/r.Floor.Rate)
	fmt.Fprintf(w, "cold default-network call: p50 %.2fx the floor (target: at most 1.4x), rate %.2fx the floor's (target: at least 0.7x)\n",
		float64(r.CallCold.P50)/float64(r.Floor.P50), r.CallCold.Rate/r.Floor.Rate)
	fmt.Fprintf(w, "\nwhere one cold default-network call goes (medians of %d runs each; parts measured apart, so they need not add up to the call's p50; the indented ones are differences of medians, which noise can make negative when small):\n", r.BreakdownOf)
	for _, st := range r.Breakdown {
		fmt.Fprintf(w, "  %-34s %10s  %s\n", st.Name, round(st.P50), st.Note)
	}
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

// warmRefilled returns a settle that waits until the host has a warm jail of function waiting
// again: each warm call consumes one, and its replacement starts in the background.
func (b *benchHost) warmRefilled(function string) func() error {
	return func() error { return WaitWarmJail(b.reg, function, 30*time.Second) }
}

// WaitWarmJail waits until reg (a host's metrics) counts a warm jail of function waiting
// (host_warm_jails_waiting), for a measurement that must not pay for a jail's start; it says
// so after within.
func WaitWarmJail(reg *prometheus.Registry, function string, within time.Duration) error {
	deadline := time.Now().Add(within)
	// Polls back off: a Gather of the host's metrics costs the host's process a good part of
	// what the jail it waits for costs, and every 200 µs it was most of the benchmark's CPU.
	pause := 500 * time.Microsecond
	for warmWaiting(reg, function) == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("no warm jail of %s waiting %s after a call: is the host starting them (host_warm_jails_waiting)?", function, within)
		}
		time.Sleep(pause)
		pause = min(2*pause, 8*time.Millisecond)
	}
	return nil
}

// warmWaiting reads host_warm_jails_waiting{function} from reg.
func warmWaiting(reg *prometheus.Registry, function string) float64 {
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, f := range families {
		if f.GetName() != "host_warm_jails_waiting" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "function" && l.GetValue() == function {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}
