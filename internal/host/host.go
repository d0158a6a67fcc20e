// Package host serves functions: it keeps one durable consumer per function on the trigger
// stream, runs each delivered message as a job, publishes the job's outputs, records it, and
// follows the functions directory as it changes.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
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
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/packages"
	"github.com/agenthost/host/internal/runner"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
	"github.com/agenthost/host/internal/schedule"
	"github.com/agenthost/host/internal/secrets"
)

// Config is how a host serves.
type Config struct {
	FunctionsDir string
	DataDir      string
	// Workspace fills $workspace in volume names.
	Workspace string
	// HostID names this host in job records and logs; the hostname and a random suffix by default.
	HostID string
	// AckWait is how long a delivered message may go without an ack or an in-progress signal
	// before JetStream hands it to another host. Running jobs send in-progress signals, so this
	// bounds how fast a dead host's job is picked up again, not how long a job may run.
	AckWait time.Duration
	// Concurrency is the default number of simultaneous runs per function.
	Concurrency int
	// DefaultTimeout applies to functions without timeout:.
	DefaultTimeout time.Duration
	// MaxLogBytes bounds the output published per job.
	MaxLogBytes int64
	// JobTTL is how long job records are kept.
	JobTTL time.Duration
	// JailUID and JailGID are the host user the jail runs as when the host is root.
	JailUID, JailGID int
	// Jail is the jail tool: "bwrap" (the default) or "nsjail".
	Jail string
	// EgressPermit lists private address ranges the egress proxy may reach all the same (an
	// internal API gateway, say); by default it refuses every private, loopback, link-local and
	// metadata address.
	EgressPermit []netip.Prefix
	// Limits bound every jailed run (pids, open files, /tmp size, CPU and file size); a
	// function's memory: sets its memory limit.
	Limits  sandbox.Limits
	Streams bus.StreamOptions
	// MaxHops bounds how many steps a flow may take, so a flow that loops back on itself stops
	// with a clear error instead of running forever.
	MaxHops int
	// Hooks are the declared webhook sources; their keys live in the webhook key store
	// (secrets.HookKeys), never handed to functions.
	Hooks        []hooks.Source
	HookMaxBytes int64
	// HookBodyTimeout bounds the time a delivery's body may take; HookMaxConcurrent the
	// deliveries read at once. Both keep stalled senders from holding the host's connections.
	HookBodyTimeout   time.Duration
	HookMaxConcurrent int
	// SecretsKey is the host key that secrets are encrypted with (secrets.LoadKey); without it
	// the host has no secret store and `$secret:` references fail clearly.
	SecretsKey []byte
	// Packages configures package installs; its CacheDir defaults to <data>/packages.
	Packages packages.Options
	// Volumes configures the volume store; its CacheDir defaults to <data>/volume-cache.
	Volumes objstore.Options
	// S3, when set, keeps volumes in that S3 bucket instead of the JetStream Object Store.
	S3 *objstore.S3Config
	// AllowNetworkHost names the functions that may use `network: host` ("*": all). The
	// annotation is written by a function's author, but such a job shares the host's network,
	// its NATS included, so only the operator can grant it; other `network: host` functions are
	// refused at load.
	AllowNetworkHost []string
}

func (c *Config) setDefaults() error {
	if c.FunctionsDir == "" {
		c.FunctionsDir = "functions"
	}
	if c.DataDir == "" {
		c.DataDir = "data"
	}
	if c.Workspace == "" {
		c.Workspace = "default"
	}
	if c.HostID == "" {
		// Unique per process, so two hosts on one machine are told apart in job records,
		// leases and version announcements.
		name, _ := os.Hostname()
		c.HostID = name + "-" + ids.New()[12:]
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = runtime.NumCPU()
	}
	if c.MaxLogBytes <= 0 {
		c.MaxLogBytes = 10 << 20
	}
	if c.HookMaxBytes <= 0 {
		c.HookMaxBytes = 1 << 20
	}
	if c.HookBodyTimeout <= 0 {
		c.HookBodyTimeout = 30 * time.Second
	}
	if c.HookMaxConcurrent <= 0 {
		c.HookMaxConcurrent = 64
	}
	if c.MaxHops <= 0 {
		c.MaxHops = 64
	}
	if c.JobTTL <= 0 {
		c.JobTTL = 7 * 24 * time.Hour
	}
	if c.JailUID == 0 && c.JailGID == 0 {
		c.JailUID, c.JailGID = 65534, 65534
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

// jailGroup is the group whose members may read what the host prepares for its jails: the
// jail's, when the host is root; -1 (the host's own) otherwise, since jails then run as the host.
func (c *Config) jailGroup() int {
	if os.Geteuid() != 0 {
		return -1
	}
	return c.JailGID
}

// Host serves the functions of one directory.
type Host struct {
	cfg      Config
	log      *zap.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	jobs     *jobs.Store
	secrets  *secrets.Store    // nil without a key
	hookKeys *secrets.HookKeys // nil without a key
	// versions records which code version each host serves, to warn about mismatches.
	versions jetstream.KeyValue
	runner   *runner.Runner
	m        *metrics
	reg      prometheus.Registerer
	// ids derives the host's own message ids and signs call inboxes (see idKey).
	ids ids.Key

	// takeCtx ends when the host stops taking new work; jobCtx when running jobs must die.
	takeCtx    context.Context
	stopTaking context.CancelFunc
	jobCtx     context.Context
	killJobs   context.CancelCauseFunc
	running    sync.WaitGroup

	mu       sync.Mutex
	stream   jetstream.Stream
	captured []string // the trigger stream's subjects, to know which outputs JetStream stores
	served   map[string]*served

	sched    *schedule.Scheduler
	subs     []*nats.Subscription
	ready    atomic.Bool
	draining atomic.Bool
	stopOnce sync.Once
	watchWG  sync.WaitGroup
}

// New builds a host on an open connection. Start begins serving.
func New(cfg Config, nc *nats.Conn, log *zap.Logger, reg prometheus.Registerer) (*Host, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	h := &Host{cfg: cfg, log: log, nc: nc, js: js, m: newMetrics(reg), reg: reg, served: map[string]*served{}, ids: ids.NewKey(cfg.SecretsKey)}
	h.takeCtx, h.stopTaking = context.WithCancel(context.Background())
	h.sched = schedule.New(log, annot.ParseSchedule, h.publishTick)
	h.jobCtx, h.killJobs = context.WithCancelCause(context.Background())
	return h, nil
}

// Start prepares the host's state, loads the functions and starts serving them. It returns
// once the host takes jobs; Ready reports the same.
func (h *Host) Start(ctx context.Context) error {
	if err := os.MkdirAll(h.cfg.DataDir, 0o711); err != nil {
		return fmt.Errorf("create data directory %s: %w", h.cfg.DataDir, err)
	}
	shimDir := filepath.Join(h.cfg.DataDir, "shims")
	if err := runtimes.WriteShims(shimDir); err != nil {
		return fmt.Errorf("write runtime shims to %s: %w", shimDir, err)
	}
	rcfg := runner.Config{
		RunDir:         filepath.Join(h.cfg.DataDir, "run"),
		ShimDir:        shimDir,
		Workspace:      h.cfg.Workspace,
		DefaultTimeout: h.cfg.DefaultTimeout,
		MaxResultBytes: int(h.nc.MaxPayload()) - 4<<10, // leave room for headers
		MaxLogBytes:    h.cfg.MaxLogBytes,
	}
	rcfg.Limits = h.cfg.Limits
	var err error
	if rcfg.Jail, err = h.newJail(); err != nil {
		rcfg.JailErr = err
		h.log.Warn("no jail available: functions marked `sandbox` will fail until it is installed", zap.Error(err))
	} else if os.Geteuid() == 0 {
		if err := checkJailReach(h.cfg.DataDir, h.cfg.JailUID, h.cfg.JailGID); err != nil {
			return err
		}
	}
	if h.cfg.SecretsKey != nil {
		if h.secrets, err = secrets.Open(ctx, h.js, h.cfg.SecretsKey, h.cfg.Streams.Replicas); err != nil {
			return err
		}
		if h.hookKeys, err = secrets.OpenHookKeys(ctx, h.js, h.cfg.SecretsKey, h.cfg.Streams.Replicas); err != nil {
			return err
		}
		// Keys set the contract's way (`host secrets set <key>`) sit among the function
		// secrets until moved; move them now rather than at the first delivery.
		for _, src := range h.cfg.Hooks {
			if src.Secret == "" {
				continue
			}
			if err := hooks.MoveKey(ctx, h.hookKeys, h.secrets, src.Secret, h.log.Named("hooks")); err != nil {
				h.log.Error("webhook key left among the function secrets", zap.String("source", src.Name), zap.Error(err))
			}
		}
		rcfg.Secrets = withoutHookKeys(h.secrets, h.cfg.Hooks)
	} else {
		h.log.Warn("no secrets key: functions and webhooks that use secrets will fail, and this host's message ids match no other host's (a schedule served by several hosts fires on each)")
	}
	pkgOpts := h.cfg.Packages
	if pkgOpts.CacheDir == "" {
		pkgOpts.CacheDir = filepath.Join(h.cfg.DataDir, "packages")
	}
	if pkgOpts.Log == nil {
		pkgOpts.Log = h.log.Named("packages")
	}
	if rcfg.Packages, err = packages.New(pkgOpts); err != nil {
		return err
	}
	if rcfg.Volumes, err = h.openVolumes(ctx); err != nil {
		return err
	}
	if rcfg.Jail != nil {
		if rcfg.HostBinary, err = copyExecutable(filepath.Join(h.cfg.DataDir, "bin")); err != nil {
			return fmt.Errorf("prepare the jail's egress init: %w", err)
		}
		rcfg.Egress = egress.New(egress.Options{Log: h.log.Named("egress"), Registerer: h.reg, Permit: h.cfg.EgressPermit})
	}
	if h.runner, err = runner.New(rcfg); err != nil {
		return err
	}
	if _, err := bus.EnsureLogStream(ctx, h.js, h.cfg.Streams); err != nil {
		return err
	}
	if _, err := bus.EnsureDeadStream(ctx, h.js, h.cfg.Streams); err != nil {
		return err
	}
	if h.jobs, err = jobs.Open(ctx, h.js, h.cfg.JobTTL, h.cfg.Streams.Replicas); err != nil {
		return err
	}
	if h.versions, err = h.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: "agent_functions", Description: "which code version each host serves", History: 1, Replicas: bus.Replicas(ctx, h.js, "KV_agent_functions", h.cfg.Streams.Replicas),
	}); err != nil {
		return fmt.Errorf("open function versions bucket: %w", err)
	}
	if err := h.reload(ctx); err != nil {
		return err
	}
	if err := h.subscribe(); err != nil {
		return err
	}
	if err := h.watch(); err != nil {
		return err
	}
	h.ready.Store(true)
	h.log.Info("host ready", zap.String("functions", h.cfg.FunctionsDir), zap.Int("served", h.servedCount()), zap.String("host_id", h.cfg.HostID))
	return nil
}

// Ready reports whether the host takes jobs.
func (h *Host) Ready() bool { return h.ready.Load() && !h.draining.Load() && h.nc.IsConnected() }

// Jobs gives read access to the job records.
func (h *Host) Jobs() *jobs.Store { return h.jobs }

// Runner is the host's job runner; the benchmark uses it to build the same jail.
func (h *Host) Runner() *runner.Runner { return h.runner }

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
		h.mu.Lock()
		all := make([]*served, 0, len(h.served))
		for _, s := range h.served {
			all = append(all, s)
		}
		h.mu.Unlock()
		for _, s := range all {
			s.cancel()
			s.loops.Wait()
		}
		h.log.Info("draining: no new jobs are taken; waiting for running jobs")
		done := make(chan struct{})
		go func() { h.running.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			h.log.Warn("drain deadline reached: stopping running jobs and handing them back for redelivery")
			h.killJobs(errHandedBack)
			<-done
		}
		h.killJobs(errors.New("host stopped"))
	})
	return nil
}

// newJail sets up the configured jail tool and says at start what it enforces with.
func (h *Host) newJail() (runner.Jail, error) {
	opts := []sandbox.Option{sandbox.WithUser(h.cfg.JailUID, h.cfg.JailGID)}
	switch h.cfg.Jail {
	case "", "bwrap":
		b, err := sandbox.NewBwrap(opts...)
		if err != nil {
			return nil, err
		}
		h.log.Info("jail ready", zap.String("jail", b.Describe()))
		return b, nil
	case "nsjail":
		n, err := sandbox.NewNsjail(opts...)
		if err != nil {
			return nil, err
		}
		h.log.Info("jail ready", zap.String("jail", n.Describe()))
		return n, nil
	}
	return nil, fmt.Errorf("--jail %q: use bwrap or nsjail", h.cfg.Jail)
}

// copyExecutable puts a copy of this binary where the jail user can run it: inside a jail it is
// the init that forwards the job's proxy connections (see egress.MaybeRunInit). The running
// binary itself may sit in a directory the jail user cannot enter.
func copyExecutable(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	in, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, ".host-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "host")
	// Renamed into place, so a job starting meanwhile never sees a half-written binary.
	return dst, os.Rename(tmp.Name(), dst)
}

// openVolumes connects the volume store: S3 when configured, else the JetStream Object Store.
func (h *Host) openVolumes(ctx context.Context) (*objstore.Volumes, error) {
	var backend objstore.Backend
	var err error
	if h.cfg.S3 != nil {
		backend, err = objstore.NewS3Backend(ctx, *h.cfg.S3)
	} else {
		backend, err = objstore.NewJetStreamBackend(ctx, h.js, objstore.DefaultJetStreamBucket, h.cfg.Streams.Replicas)
	}
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	o := h.cfg.Volumes
	if o.CacheDir == "" {
		o.CacheDir = filepath.Join(h.cfg.DataDir, "volume-cache")
	}
	if o.Log == nil {
		o.Log = h.log.Named("volumes")
	}
	if o.Registerer == nil {
		o.Registerer = h.reg
	}
	if o.Replicas == 0 {
		o.Replicas = h.cfg.Streams.Replicas
	}
	if o.Owner == nil && os.Geteuid() == 0 {
		// Jobs run as the jail user, who must be able to change what is synced in; a root
		// host reads and writes those files regardless.
		o.Owner = &objstore.Owner{UID: h.cfg.JailUID, GID: h.cfg.JailGID}
	}
	v, err := objstore.New(ctx, h.js, backend, o)
	if err != nil {
		return nil, fmt.Errorf("volume store %s: %w", backend.Name(), err)
	}
	h.log.Info("volume store ready", zap.String("store", backend.Name()), zap.String("cache", o.CacheDir))
	return v, nil
}

var errHandedBack = errors.New("the host shut down before the run finished; the job was handed back for redelivery")

func (h *Host) servedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.served)
}
