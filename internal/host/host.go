package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/budget"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/flowctl"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/join"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/presence"
	"github.com/agenthost/host/internal/schedule"
	"github.com/agenthost/host/internal/trace"
)

// Defaults of Config, exported for the flags that set them.
const (
	DefaultAckWait = 30 * time.Second
	DefaultMaxHops = 64
	// DefaultFlowMaxJobs is a flow's job budget: a map's own cap (route.MaxItems), so that one
	// map fits, and nested maps do not multiply past it.
	DefaultFlowMaxJobs = 10_000
	DefaultJobTTL      = 7 * 24 * time.Hour
	// DefaultAnnounceTTL is how long a host stays listed as alive, and its functions as
	// served, unless it says it is alive again (it does, every third of it, while it lives).
	DefaultAnnounceTTL = 30 * time.Second
)

// DefaultMaxToolDepth bounds how deeply tool calls (tools:) nest: a job's tool call is depth
// 1, that job's own tool call depth 2, and so on (docs/contract.md, section 9).
const DefaultMaxToolDepth = 8

// Config is how a host serves. The zero value of every field but Runner is usable: it says
// what it stands for.
type Config struct {
	// FunctionsDir is the directory of functions, "functions" when empty.
	FunctionsDir string
	// DataDir holds the host's state (function snapshots under functions/); "data" when empty.
	DataDir string
	// HostID names this host in job records and logs; the hostname and a random suffix when empty.
	HostID string
	// AckWait is how long a delivered message may go without an ack or an in-progress signal
	// before JetStream hands it to another host (DefaultAckWait when zero). Running jobs send
	// in-progress signals, so this bounds how fast a dead host's job is picked up again, not how
	// long a job may run.
	AckWait time.Duration
	// Concurrency is the default number of simultaneous runs per function; the number of CPUs
	// when zero.
	Concurrency int
	// JobTTL is how long job records are kept; DefaultJobTTL when zero.
	JobTTL time.Duration
	// AnnounceTTL bounds how long a host that died without withdrawing stays listed as serving
	// its functions (`host functions`, the dashboard, and whether a call is accepted);
	// DefaultAnnounceTTL when zero. It is the live hosts bucket's TTL (package presence), so
	// every host on one NATS should use the same.
	AnnounceTTL time.Duration
	// Streams configures the streams and buckets the host creates.
	Streams bus.StreamOptions
	// MaxHops bounds how many steps a flow may take, so a flow that loops back on itself stops
	// with a clear error instead of running forever; DefaultMaxHops when zero.
	MaxHops int
	// FlowMaxJobs bounds how many jobs one flow may start through its next: edges, every item
	// of a map one, nested maps multiplied, counted across hosts (see budget.go);
	// DefaultFlowMaxJobs when zero, no bound when negative.
	FlowMaxJobs int
	// FlowLease is how long a limit: key stays held by a job whose host stopped renewing it
	// (it died): the most a dead host's key stays taken. flowctl.DefaultLease when zero.
	FlowLease time.Duration
	// MaxToolDepth bounds how deeply tool calls nest (a tool that calls a tool ...): a call
	// past it fails for good, naming the bound. Cycles are refused at load (functions.
	// RefuseToolCycles); this is the bound across hosts whose directories differ, and on the
	// slots a chain of waiting callers holds. DefaultMaxToolDepth when zero.
	MaxToolDepth int
	// AllowNetworkHost names the functions that may use `network: host` ("*": all); none when
	// empty. The annotation is written by a function's author, but such a job shares the host's
	// network, its NATS included, so only the operator can grant it; other `network: host`
	// functions are refused at load.
	AllowNetworkHost []string
	// SnapshotGroup is the group given read access to the function snapshots, so that the jail's
	// user can read them; zero or -1 keeps the host's own group.
	SnapshotGroup int

	// Tracer makes the spans of each job and carries each flow's trace across its messages
	// (serve --otlp-endpoint; tracing.go); nil traces nothing.
	Tracer *trace.Tracer
	// TraceURL links a job or flow page of the dashboard to its trace: {trace_id} is replaced
	// (serve --trace-url); none when empty.
	TraceURL string

	// ApprovalURL is where the web face is reached (http://host:port), for the signed links an
	// approval is announced with; none when empty.
	ApprovalURL string

	// Deployed serves the current deployment (package deploy) instead of FunctionsDir, and
	// follows each new one (serve --deployed; see deployed.go).
	Deployed bool
	// Check refuses what `host check` refuses (check.Function): a function it refuses with a
	// *runtimes.DefinitionError is not served. nil checks nothing beyond loading.
	Check func(ctx context.Context, f *functions.Function) error

	// Served, when set, is told every set of functions the host is about to serve (once the
	// trigger stream takes their subjects), as the event sources beside it need (package
	// pgsource follows their on: postgres: tables). It must not block.
	Served func(fns map[string]*functions.Function)

	// Runner runs the jobs; New refuses a Config without one. Package wire builds the real one.
	Runner Runner
	// IDs derives the host's own message ids and signs call inboxes; when nil a random key is
	// used, and this host's message ids then match no other host's (see ids.NewKey).
	IDs ids.Key
	// Store is the embedded NATS server's JetStream store, watched and put back after it
	// refused writes (a full disk); nil on an external NATS, whose refusals the host only
	// reports.
	Store EmbeddedStore
	// Routers start functions from events the host routes itself (package s3events).
	Routers []EventRouter
	// Staged promotes and discards the staged volume versions of approve: ... stage steps on
	// their decision; nil on a host without a volume store (whose runner refuses volumes).
	Staged StagedVolumes
}

// EventRouter starts functions from events that name no function (an S3 bucket notification
// names a bucket): told the served functions whenever they change, it names the subjects the
// trigger stream must capture for it.
type EventRouter interface {
	Route(fns map[string]*functions.Function) []string
}

// SetDefaults fills the zero values of c. New calls it; wiring calls it first to know the
// directories.
func (c *Config) SetDefaults() error {
	if c.FunctionsDir == "" {
		c.FunctionsDir = "functions"
	}
	if c.DataDir == "" {
		c.DataDir = "data"
	}
	if c.HostID == "" {
		// Unique per process, so two hosts on one machine are told apart in job records,
		// leases and version announcements.
		name, _ := os.Hostname()
		c.HostID = name + "-" + ids.New()[12:]
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.Concurrency <= 0 {
		c.Concurrency = runtime.NumCPU()
	}
	if c.MaxHops <= 0 {
		c.MaxHops = DefaultMaxHops
	}
	if c.FlowMaxJobs == 0 {
		c.FlowMaxJobs = DefaultFlowMaxJobs
	}
	if c.FlowLease <= 0 {
		c.FlowLease = flowctl.DefaultLease
	}
	if c.MaxToolDepth <= 0 {
		c.MaxToolDepth = DefaultMaxToolDepth
	}
	if c.JobTTL <= 0 {
		c.JobTTL = DefaultJobTTL
	}
	if c.AnnounceTTL <= 0 {
		c.AnnounceTTL = DefaultAnnounceTTL
	}
	if c.SnapshotGroup == 0 {
		c.SnapshotGroup = -1
	}
	// The jail binds directories by absolute path.
	var err error
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return fmt.Errorf("data directory %s: %w", c.DataDir, err)
	}
	if c.FunctionsDir, err = filepath.Abs(c.FunctionsDir); err != nil {
		return fmt.Errorf("functions directory %s: %w", c.FunctionsDir, err)
	}
	return nil
}

// records keeps the job records. *jobs.Store is the one; the host opens it at start.
type records interface {
	Get(ctx context.Context, id string) (*jobs.Record, error)
	GetRev(ctx context.Context, id string) (*jobs.Record, jobs.Version, error)
	Move(ctx context.Context, r *jobs.Record, from jobs.Version) (jobs.Version, error)
	Amend(ctx context.Context, r *jobs.Record, at jobs.Version) (jobs.Version, error)
	CreateAsync(r *jobs.Record) (jetstream.PubAckFuture, error)
	Delete(ctx context.Context, id string, at jobs.Version) error
	FlowCanceled(ctx context.Context, flow string) (*jobs.CanceledFlow, error)
	WaitFinal(ctx context.Context, id string) (*jobs.Record, error)
}

// Host serves the functions of one directory.
type Host struct {
	cfg  Config
	log  *zap.Logger
	nc   *nats.Conn
	js   jetstream.JetStream
	jobs records
	// joins keeps what joining functions have gathered (see gather.go).
	joins *join.Store
	// budget counts each flow's jobs against Config.FlowMaxJobs (see budget.go).
	budget *budget.Store
	// flow holds limit: and rate: state across hosts (flow.go); waiters counts the jobs this
	// host handed back to wait for it, for host_flow_control_waiting.
	flow    *flowctl.Store
	waiters *waiters
	// people are the users: who decides on their own NATS login, and the groups approve:
	// lines name (see decide.go, groups.go).
	people *people.Store
	// presence records which hosts live and which code version each serves, to warn about
	// mismatches and to list them; this host stays alive there by its heartbeat.
	presence *presence.Board
	// stopHeartbeat ends the announcements' heartbeat; heartbeatDone is closed once it has.
	stopHeartbeat context.CancelFunc
	heartbeatDone chan struct{}
	logJS         jetstream.JetStream // publishes job logs (see newLogPublisher)
	runner        Runner
	m             *metrics
	// ids derives the host's own message ids and signs call inboxes (Config.IDs).
	ids ids.Key

	// pulls ends every waiting pull when they must be sent again (renewPulls).
	pulls pullGeneration
	// takeCtx ends when the host stops taking new work; jobCtx when running jobs must die.
	takeCtx    context.Context
	stopTaking context.CancelFunc
	jobCtx     context.Context
	killJobs   context.CancelCauseFunc
	running    sync.WaitGroup
	// stops holds the cancel of each running job by job id (see stopJob).
	stops sync.Map

	mu       sync.Mutex
	stream   jetstream.Stream
	captured []string // the trigger stream's subjects, to know which outputs JetStream stores
	served   map[string]*served
	gates    map[string][]string // the approval gates before each function (approvalGates)
	unserved int                 // functions the last reload could not serve (a NATS or disk error); watch retries

	sched    *schedule.Scheduler
	named    *namedSchedules // the schedules added by name (named.go)
	subs     []*nats.Subscription
	cancels  *nats.Subscription // agent.cancel.*, kept until running jobs have ended
	ready    atomic.Bool
	draining atomic.Bool
	stopOnce sync.Once
	watchWG  sync.WaitGroup
	// atShutdown is what the host's builder serves beside the engine (see AtShutdown).
	atShutdown []func()
	// store is whether JetStream takes writes (see storewatch.go).
	store storeState
	// dep is the directory or deployment served, and the files refused (see deployed.go).
	dep deployState
}

// New builds a host on an open connection. Start begins serving.
func New(cfg Config, nc *nats.Conn, log *zap.Logger, reg prometheus.Registerer) (*Host, error) {
	if cfg.Runner == nil {
		return nil, errors.New("host: Config.Runner is nil: build the host with package app, which makes the runner")
	}
	if err := cfg.SetDefaults(); err != nil {
		return nil, err
	}
	if cfg.IDs == nil {
		cfg.IDs = ids.NewKey(nil)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	js = bus.Patient(js, log.Named("jetstream"))
	logJS, err := newLogPublisher(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream for job logs: %w", err)
	}
	h := &Host{cfg: cfg, log: log, nc: nc, js: js, logJS: logJS, runner: cfg.Runner, m: newMetrics(reg), served: map[string]*served{}, ids: cfg.IDs}
	h.waiters = newWaiters(h.m.flowWaiting)
	h.takeCtx, h.stopTaking = context.WithCancel(context.Background())
	h.sched = schedule.New(log, annot.ParseSchedule, h.publishTick)
	h.jobCtx, h.killJobs = context.WithCancelCause(context.Background())
	return h, nil
}

// Start creates the host's streams and buckets, loads the functions and starts serving them.
// It returns once the host takes jobs; Ready reports the same.
func (h *Host) Start(ctx context.Context) error {
	if err := h.sizeStores(ctx); err != nil {
		return err
	}
	logs, err := bus.EnsureLogStream(ctx, h.js, h.cfg.Streams)
	if err != nil {
		return err
	}
	if cfg := logs.CachedInfo().Config; cfg.Replicas <= 1 && cfg.PersistMode != jetstream.AsyncPersistMode {
		// Its persist mode cannot change in place (see bus.EnsureLogStream).
		h.log.Info("the log stream, made by an older host, persists every line as durably as a result, which slows noisy jobs when the server syncs every write; "+
			"remove it (`nats stream rm "+bus.LogStream+"`, losing the kept logs) and restart the host to have it persist asynchronously", zap.String("stream", bus.LogStream))
	}
	if _, err := bus.EnsureResultStream(ctx, h.js, h.cfg.Streams); err != nil {
		return err
	}
	if _, err := bus.EnsureDeadStream(ctx, h.js, h.cfg.Streams); err != nil {
		return err
	}
	if h.joins, err = join.Open(ctx, h.js, h.cfg.Streams.Replicas); err != nil {
		return err
	}
	if h.jobs, err = jobs.Open(ctx, h.js, h.cfg.JobTTL, h.cfg.Streams.Replicas); err != nil {
		return err
	}
	if h.budget, err = budget.Open(ctx, h.js, h.cfg.JobTTL, h.cfg.Streams.Replicas); err != nil {
		return err
	}
	if h.flow, err = flowctl.Open(ctx, h.js, h.cfg.Streams.Replicas); err != nil {
		return err
	}
	go h.waiters.sweep(h.takeCtx)
	go h.sweepStaged(h.takeCtx)
	// The hosts' TTL is what makes a dead host leave the listings: nothing else ever deletes
	// its entries.
	if h.presence, err = presence.Open(ctx, h.js, h.cfg.AnnounceTTL, h.cfg.Streams.Replicas); err != nil {
		return err
	}
	if err := h.presence.Alive(ctx, h.cfg.HostID); err != nil {
		return err
	}
	// Before the functions load: a schedule paused while the host was down stays paused.
	schedules, err := schedule.Open(ctx, h.js, h.cfg.Streams.Replicas)
	if err != nil {
		return err
	}
	if err := h.sched.Watch(h.takeCtx, schedules); err != nil {
		return err
	}
	if h.named, err = h.followNamed(h.takeCtx, schedules); err != nil {
		return err
	}
	if h.people, err = people.Open(ctx, h.js, h.cfg.Streams.Replicas); err != nil {
		return err
	}
	// Every bucket is open by now, the builder's (secrets, hooks, volumes) too.
	if err := bus.ApplyStoreLimits(ctx, h.js, h.cfg.Streams.Limits); err != nil {
		return err
	}
	if err := h.startServing(ctx); err != nil {
		return err
	}
	if err := h.subscribe(); err != nil {
		return err
	}
	if err := h.follow(); err != nil {
		return err
	}
	h.watchUsers(h.takeCtx)
	go h.renewPulls(h.takeCtx)
	if h.cfg.Store != nil {
		go h.watchStore(h.takeCtx, h.cfg.Store)
	}
	hbCtx, stop := context.WithCancel(context.Background())
	h.stopHeartbeat, h.heartbeatDone = stop, make(chan struct{})
	go func() {
		defer close(h.heartbeatDone)
		h.heartbeat(hbCtx)
	}()
	h.ready.Store(true)
	h.log.Info("host ready", zap.String("functions", h.cfg.FunctionsDir), zap.Int("served", h.servedCount()), zap.String("host_id", h.cfg.HostID))
	return nil
}

// Ready reports whether the host takes jobs.
func (h *Host) Ready() bool { return h.ready.Load() && !h.draining.Load() && h.nc.IsConnected() }

// Shutdown drains: the host stops taking work, lets running jobs finish until ctx ends, then
// kills what is left and hands those messages back for redelivery. Nothing is lost either way.
func (h *Host) Shutdown(ctx context.Context) error {
	h.stopOnce.Do(func() {
		h.draining.Store(true)
		for _, s := range h.subs {
			_ = s.Unsubscribe()
		}
		h.stopTaking()
		h.watchWG.Wait()
		h.sched.Stop()
		h.named.stop()
		all := h.servedSnapshot()
		for _, s := range all {
			s.cancel()
			// No job takes a warm jail anymore; they go now, not with the process.
			h.cool(s.fn.Name)
		}
		h.log.Info("draining: no new jobs are taken; waiting for running jobs")
		// A fetch loop runs its job itself, so the loops end only once their jobs have: they
		// are waited for under the drain deadline too, or a long job would hold the drain
		// past it.
		done := make(chan struct{})
		go func() {
			for _, s := range all {
				s.loops.Wait()
			}
			h.running.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			h.log.Warn("drain deadline reached: stopping running jobs and handing them back for redelivery")
			h.killJobs(errHandedBack)
			<-done
		}
		h.killJobs(errors.New("host stopped"))
		h.runAtShutdown()
		// The spans of the jobs that ran go out before the host is gone.
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.cfg.Tracer.Shutdown(tctx); err != nil {
			h.log.Warn("trace spans not sent at shutdown", zap.Error(err))
		}
		cancel()
		if h.cancels != nil {
			_ = h.cancels.Unsubscribe()
		}
		h.withdrawAll()
	})
	return nil
}

// servedSnapshot is every function this host serves at this moment, for work done outside h.mu.
func (h *Host) servedSnapshot() []*served {
	h.mu.Lock()
	defer h.mu.Unlock()
	all := make([]*served, 0, len(h.served))
	for _, s := range h.served {
		all = append(all, s)
	}
	return all
}

// withdrawAll ends the heartbeat and deletes this host's announcements: a host that stopped
// leaves `host functions` and the dashboard at once, not when its entries expire.
func (h *Host) withdrawAll() {
	if h.stopHeartbeat != nil {
		h.stopHeartbeat()
		<-h.heartbeatDone
	}
	all := h.servedSnapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range all {
		h.retire(ctx, s, true)
	}
	if h.presence != nil {
		if err := h.presence.Leave(ctx, h.cfg.HostID); err != nil {
			h.log.Debug("cannot say this host left; it drops out of the listings when its entry expires", zap.Error(err))
		}
	}
}

var errHandedBack = errors.New("the host shut down before the run finished; the job was handed back for redelivery")

func (h *Host) servedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.served)
}
