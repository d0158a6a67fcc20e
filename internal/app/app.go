// Package app is the composition root: the one place that makes every dependency of the
// engine (the jail, the secret stores, the package installer, the volume store, the egress
// proxy, the runner) from one Config and hands them to host.New, configures the host's web
// face (package web) with what it serves beside the engine (the webhook handler and the volume
// store), and runs it all as `host serve` does (Run: the HTTP listener, the embedded NATS
// server, the drain). `host serve`, the test harness (hosttest) and the benchmark all build
// their hosts and runners here.
package app

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jailinit/initbin"
	"github.com/agenthost/host/internal/mcp"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/packages"
	"github.com/agenthost/host/internal/runner"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/trace"
	"github.com/agenthost/host/internal/web"
	"github.com/agenthost/host/internal/webauth"
)

// DefaultWorkspace is the workspace of a host that names none.
const DefaultWorkspace = "default"

// Config is everything a host is built from: the engine's own settings (host.Config, whose
// Runner and IDs New fills in), those of what jobs run with and those of the web face. The
// zero value of every field is usable and says what it stands for.
type Config struct {
	host.Config

	// Web guards the web face: its token, and whether it listens on loopback only. New adds
	// the stored users and the OpenID provider (OIDC) to it.
	Web webauth.Config
	// OIDC logs people in to the web face through an OpenID provider (serve --oidc-*); none
	// when its Issuer is empty. Its RedirectURL defaults to ApprovalURL + webauth.CallbackPath.
	OIDC webauth.OIDCConfig
	// OTLPEndpoint is where traces go (serve --otlp-endpoint; package trace): with it, or the
	// OTEL_EXPORTER_OTLP_* variables, New makes the host's Tracer unless it has one.
	OTLPEndpoint string
	// MCPAll offers every function as an MCP tool on /mcp (serve --mcp-all), not only those
	// that say tool:.
	MCPAll bool

	// Workspace fills $workspace in volume names; DefaultWorkspace when empty.
	Workspace string
	// DefaultTimeout applies to functions without timeout:; runner.DefaultTimeout when zero.
	DefaultTimeout time.Duration
	// MaxLogBytes bounds the output published per job; runner.DefaultMaxLogBytes when zero.
	MaxLogBytes int64
	// Jail is the jail tool: "bwrap" (also when empty) or "nsjail".
	Jail string
	// JailUID and JailGID are the host user the jail runs as when the host is root;
	// sandbox.DefaultUID and sandbox.DefaultGID when both are zero.
	JailUID, JailGID int
	// Limits bound every jailed run (pids, open files, /tmp size, CPU and file size); a
	// function's memory: sets its memory limit. Zero fields take the sandbox's defaults.
	Limits sandbox.Limits
	// JobDisk bounds a jailed job's /job, volumes included (runner.Config.JobDisk): 0 is
	// runner.DefaultJobDisk, a negative value no bound.
	JobDisk int64
	// EgressPermit lists private address ranges the egress proxy may reach all the same (an
	// internal API gateway, say); when empty it refuses every private, loopback, link-local and
	// metadata address.
	EgressPermit []netip.Prefix
	// EgressCAFiles are PEM files of roots the proxy trusts, besides the system's, for the
	// upstreams it terminates TLS for (serve --egress-ca-file): private upstreams, tests.
	EgressCAFiles []string
	// EgressResolve pins names to addresses for the proxy (serve --egress-resolve), the one way
	// a job reaches a loopback or private upstream by name.
	EgressResolve map[string]netip.AddrPort
	// SecretsKey is the host key that secrets are encrypted with (secrets.LoadKey), and the
	// root of the host's message ids. Without it the host has no secret store, `$secret:`
	// references fail clearly, and this host's message ids match no other host's.
	SecretsKey []byte
	// Packages configures package installs; its CacheDir defaults to <data>/packages.
	Packages packages.Options
	// Volumes configures the volume store; its CacheDir defaults to <data>/volume-cache.
	Volumes objstore.Options
	// S3, when set, keeps volumes in that S3 bucket instead of the JetStream Object Store.
	S3 *objstore.S3Config
	// Hooks are the declared webhook sources (none when empty); their keys live in the webhook
	// key store (secrets.HookKeys), never handed to functions.
	Hooks []hooks.Source
	// HookMaxBytes, HookBodyTimeout and HookMaxConcurrent bound webhook deliveries; zero takes
	// hooks.DefaultMaxBytes, hooks.DefaultBodyTimeout and hooks.DefaultMaxConcurrent. They keep
	// stalled senders from holding the host's connections.
	HookMaxBytes      int64
	HookBodyTimeout   time.Duration
	HookMaxConcurrent int
	// RunMaxBytes bounds a body posted to run a function: POST /run, the dashboard's run form,
	// an /mcp request (a job's own endpoint's too); web.DefaultRunMaxBytes when zero.
	RunMaxBytes int64
	// Warm is how many jails are kept started ahead of demand for each sandboxed function
	// without a warm: annotation: runner.DefaultWarm when zero, none when negative.
	Warm int
	// WarmMax and WarmMaxMemory cap the warm jails of the host, by count and by the memory
	// they reserve; runner.DefaultWarmMax and runner.DefaultWarmMaxMemory when zero.
	WarmMax       int
	WarmMaxMemory int64
	// Fork serves sandboxed Python functions' jobs by forking each from a template jail of
	// its function version (runner.Config.Fork).
	Fork bool
	// EgressForwardInJail keeps the jail init as every `network: proxy` job's forwarder,
	// even where the host can hold the job's proxy address in its jail itself (see
	// runner.Config.ForwardInJail).
	EgressForwardInJail bool
	// S3EventsSubject is where S3 servers publish their bucket notifications
	// (s3events.DefaultSubject when empty), for the functions with on: s3:.
	S3EventsSubject string
	// Postgres follows the tables functions name with on: postgres: (serve --postgres).
	Postgres Postgres
}

func (c *Config) setDefaults() error {
	if err := c.Config.SetDefaults(); err != nil {
		return err
	}
	if c.Workspace == "" {
		c.Workspace = DefaultWorkspace
	}
	if c.JailUID == 0 && c.JailGID == 0 {
		c.JailUID, c.JailGID = sandbox.DefaultUID, sandbox.DefaultGID
	}
	if c.HookMaxBytes <= 0 {
		c.HookMaxBytes = hooks.DefaultMaxBytes
	}
	if c.RunMaxBytes <= 0 {
		c.RunMaxBytes = web.DefaultRunMaxBytes
	}
	if c.HookBodyTimeout <= 0 {
		c.HookBodyTimeout = hooks.DefaultBodyTimeout
	}
	if c.HookMaxConcurrent <= 0 {
		c.HookMaxConcurrent = hooks.DefaultMaxConcurrent
	}
	if c.Warm == 0 {
		c.Warm = runner.DefaultWarm
	}
	if os.Geteuid() == 0 {
		// Jails then run as the jail's user, who must read the function snapshots; otherwise
		// they run as the host, and its own group is right.
		c.SnapshotGroup = c.JailGID
	}
	return nil
}

// Host is a host as New builds it: the engine, and the configuration of its web face.
type Host struct {
	*host.Host
	// Web is what Handler serves with; a test may change it before calling Handler.
	Web web.Config
}

// Handler serves the host's web face, its /metrics from metrics: New is handed only a
// Registerer, and the process may gather more than the host registers (Go's own collectors).
func (h *Host) Handler(metrics prometheus.Gatherer) http.Handler {
	cfg := h.Web
	cfg.Metrics = metrics
	return web.New(cfg)
}

// New builds a host and everything it depends on, on an open connection. Start begins serving.
func New(ctx context.Context, cfg Config, nc *nats.Conn, log *zap.Logger, reg prometheus.Registerer) (*Host, error) {
	js, err := cfg.open(nc, log)
	if err != nil {
		return nil, err
	}
	// Every administrative act a host answers for is recorded there (host audit).
	if err := audit.Ensure(ctx, js, cfg.Streams.Replicas); err != nil {
		return nil, err
	}
	var st *stores
	if cfg.SecretsKey != nil {
		if st, err = openStores(ctx, js, cfg, log); err != nil {
			return nil, err
		}
	} else {
		log.Warn("no secrets key: functions and webhooks that use secrets will fail, and this host's message ids match no other host's (a schedule served by several hosts fires on each)")
	}
	msgIDs := ids.NewKey(cfg.SecretsKey)
	pg, err := newPostgres(ctx, cfg, nc, msgIDs, log)
	if err != nil {
		return nil, err
	}
	// The engine is made after the runner; a job's tools read the directory it serves then
	// (under --deployed the current deployment's).
	var engine *host.Host
	servedDir := func() string {
		if engine == nil {
			return cfg.FunctionsDir
		}
		return engine.FunctionsDir()
	}
	rcfg, volumes, err := runnerConfig(ctx, cfg, nc, js, log, reg, msgIDs, servedDir)
	if err != nil {
		return nil, err
	}
	registry, err := hooks.OpenRegistry(ctx, js, cfg.Streams.Replicas)
	if err != nil {
		return nil, err
	}
	hcfg := hooks.Config{Sources: cfg.Hooks, MaxBytes: cfg.HookMaxBytes, MsgIDs: msgIDs.Hook, Sign: msgIDs.Derive,
		BodyTimeout: cfg.HookBodyTimeout, MaxConcurrent: cfg.HookMaxConcurrent, Registry: registry, HostID: cfg.HostID}
	// The handler is made before the engine, which knows whether the store takes writes.
	hcfg.StoreRefusal = func() *bus.StoreRefusal {
		if engine == nil {
			return nil
		}
		return engine.StoreRefusal()
	}
	var keys hooks.Keys
	if st != nil {
		keys = st.hookKeys
		hcfg.FunctionSecrets = st.secrets
	}
	hookHandler := hooks.New(js, keys, log.Named("hooks"), hcfg)
	if st != nil {
		rcfg.Secrets = withoutHookKeys(st.secrets, hookHandler.KeyUser)
	}
	// The host's runner keeps warm jails (the host tells it which functions it serves) and
	// reports them; the benchmark's, built from RunnerConfig too, keeps none.
	rcfg.Warm = runner.WarmConfig{PerFunction: max(cfg.Warm, 0), Max: cfg.WarmMax, MaxMemory: cfg.WarmMaxMemory}
	rcfg.Fork = cfg.Fork
	rcfg.Registerer = reg
	r, err := runner.New(rcfg)
	if err != nil {
		return nil, err
	}
	hc := cfg.Config
	hc.Runner = r
	hc.IDs = msgIDs
	hc.Staged = volumes
	h, err := startEngine(ctx, cfg, hc, nc, js, pg, log, reg)
	if err != nil {
		return nil, err
	}
	engine = h
	if err := serveBeside(ctx, h, nc, st, hookHandler, cfg.HostID, log); err != nil {
		return nil, err
	}
	if err := serveReviews(h, nc, volumes, cfg.HostID, log); err != nil {
		return nil, err
	}
	auth, err := webPeople(ctx, cfg, js, h, log)
	if err != nil {
		return nil, err
	}
	return &Host{Host: h, Web: web.Config{
		Engine: h, NC: nc, FunctionsDir: cfg.FunctionsDir, FunctionsDirOf: h.FunctionsDir, Volumes: volumes, Auth: auth, Log: log, Sign: hc.IDs.Derive,
		Hooks:        hookHandler,
		RunMaxBytes:  cfg.RunMaxBytes,
		QueueTimeout: cfg.AckWait, // as long as the engine gives an agent.call to queue its job
		MCPAll:       cfg.MCPAll,
		TraceURL:     cfg.TraceURL,
	}}, nil
}

// serveBeside starts what a host serves beside the engine on its connection, until it shuts
// down: the secret administration (a host with a key answers agent.admin.secrets.*), and the
// watch of the webhook sources added with `host hooks add`.
func serveBeside(ctx context.Context, h *host.Host, nc *nats.Conn, st *stores, hookHandler *hooks.Handler, hostID string, log *zap.Logger) error {
	if st != nil {
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("open JetStream: %w", err)
		}
		admin := &secrets.Admin{Secrets: st.secrets, HookKeys: st.hookKeys, HostID: hostID, Log: log.Named("secrets"),
			Audit: func(ctx context.Context, e audit.Entry) error { return audit.Append(ctx, js, e) }}
		subs, err := admin.Serve(nc)
		if err != nil {
			return err
		}
		h.AtShutdown(func() {
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
		})
		if err := st.secrets.KeyMismatch(); err != nil {
			log.Error("this host's secrets key is not the one the stored secrets are sealed with: it can neither read nor set them", zap.Error(err))
		}
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	h.AtShutdown(stopWatch)
	loadCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := hookHandler.Watch(watchCtx); err != nil {
		stopWatch()
		return err
	}
	hookHandler.WarnMissingKeys(loadCtx)
	return nil
}

// RunnerConfig prepares the data directory and configures the runner of a host with cfg: its
// jail, packages, volumes and egress proxy; New adds the secret store. The benchmark builds its
// runner from it too, so that it measures the very jail the host uses.
func RunnerConfig(ctx context.Context, cfg Config, nc *nats.Conn, log *zap.Logger, reg prometheus.Registerer) (runner.Config, error) {
	js, err := cfg.open(nc, log)
	if err != nil {
		return runner.Config{}, err
	}
	rcfg, _, err := runnerConfig(ctx, cfg, nc, js, log, reg, ids.NewKey(cfg.SecretsKey), nil)
	return rcfg, err
}

// open fills the zero values of c and opens JetStream on nc, patiently (bus.Patient).
func (c *Config) open(nc *nats.Conn, log *zap.Logger) (jetstream.JetStream, error) {
	if err := c.setDefaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	// Patient: a host starting beside a cluster that is electing leaders waits for them.
	return bus.Patient(js, log.Named("jetstream")), nil
}

// stores are the secret stores of a host with a secrets key.
type stores struct {
	secrets  *secrets.Store
	hookKeys *secrets.HookKeys
}

func openStores(ctx context.Context, js jetstream.JetStream, cfg Config, log *zap.Logger) (*stores, error) {
	var st stores
	var err error
	if st.secrets, err = secrets.Open(ctx, js, cfg.SecretsKey, cfg.Streams.Replicas); err != nil {
		return nil, err
	}
	if st.hookKeys, err = secrets.OpenHookKeys(ctx, js, cfg.SecretsKey, cfg.Streams.Replicas); err != nil {
		return nil, err
	}
	// Keys set the contract's way (`host secrets set <key>`) sit among the function secrets
	// until moved; move them now rather than at the first delivery.
	for _, src := range cfg.Hooks {
		if src.Secret == "" {
			continue
		}
		if err := hooks.MoveKey(ctx, st.hookKeys, st.secrets, src.Secret, log.Named("hooks")); err != nil {
			log.Error("webhook key left among the function secrets", zap.String("source", src.Name), zap.Error(err))
		}
	}
	return &st, nil
}

// runnerConfig is RunnerConfig on an open JetStream; it also returns the volume store it made,
// which the web face's volume pages read.
func runnerConfig(ctx context.Context, cfg Config, nc *nats.Conn, js jetstream.JetStream, log *zap.Logger, reg prometheus.Registerer, msgIDs ids.Key, functionsDir func() string) (runner.Config, *objstore.Volumes, error) {
	var none runner.Config
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return none, nil, fmt.Errorf("create data directory %s: %w", cfg.DataDir, err)
	}
	shimDir := filepath.Join(cfg.DataDir, "shims")
	if err := runtimes.WriteShims(shimDir); err != nil {
		return none, nil, fmt.Errorf("write runtime shims to %s: %w", shimDir, err)
	}
	if err := runtimes.CompileShims(shimDir, sandbox.JailPath, os.Getenv("PATH")); err != nil {
		log.Warn("cannot compile the Python shim ahead; Python jobs compile it on every start (about 2 ms each): check that python3 runs on this host",
			zap.String("shims", shimDir), zap.Error(err))
	}
	rcfg := runner.Config{
		RunDir:         filepath.Join(cfg.DataDir, "run"),
		ShimDir:        shimDir,
		Workspace:      cfg.Workspace,
		DefaultTimeout: cfg.DefaultTimeout,
		MaxResultBytes: int(nc.MaxPayload()) - 4<<10, // leave room for headers
		MaxLogBytes:    cfg.MaxLogBytes,
		Limits:         cfg.Limits,
		JobDisk:        cfg.JobDisk,
		Log:            log.Named("runner"),
		ForwardInJail:  cfg.EgressForwardInJail,
	}
	var err error
	if rcfg.Jail, err = newJail(cfg, log); err != nil {
		rcfg.JailErr = err
		log.Warn("no jail available: functions marked `sandbox` will fail until it is installed", zap.Error(err))
	} else if os.Geteuid() == 0 {
		if err := checkJailReach(cfg.DataDir, cfg.JailUID, cfg.JailGID); err != nil {
			return none, nil, err
		}
	}
	pkgOpts := cfg.Packages
	if pkgOpts.CacheDir == "" {
		pkgOpts.CacheDir = filepath.Join(cfg.DataDir, "packages")
	}
	if pkgOpts.Log == nil {
		pkgOpts.Log = log.Named("packages")
	}
	if pkgOpts.UID == 0 && pkgOpts.GID == 0 {
		// The jail's user: it owns nothing of the host's, and already must reach <data>.
		pkgOpts.UID, pkgOpts.GID = cfg.JailUID, cfg.JailGID
	}
	if rcfg.Packages, err = packages.New(pkgOpts); err != nil {
		return none, nil, err
	}
	volumes, err := openVolumes(ctx, cfg, js, log, reg)
	if err != nil {
		return none, nil, err
	}
	rcfg.Volumes = volumes
	if rcfg.Jail != nil {
		if rcfg.JailInit, err = installJailInit(filepath.Join(cfg.DataDir, "bin"), log); err != nil {
			return none, nil, err
		}
		if rcfg.Egress, err = newEgress(cfg, log, reg); err != nil {
			return none, nil, err
		}
		// A function's tools: reach it through its proxy: calls over this host's NATS, of the
		// functions its directory has.
		rcfg.Tools = mcp.NewJobTools(mcp.Config{NC: nc, FunctionsDir: cfg.FunctionsDir, FunctionsDirOf: functionsDir, MaxBodyBytes: cfg.RunMaxBytes, Log: log, Sign: msgIDs.Derive})
	}
	return rcfg, volumes, nil
}

// newJail sets up the configured jail tool and says at start what it enforces with.
func newJail(cfg Config, log *zap.Logger) (runner.Jail, error) {
	scfg := sandbox.Config{UID: cfg.JailUID, GID: cfg.JailGID}
	var j interface {
		runner.Jail
		Describe() string
	}
	var err error
	switch cfg.Jail {
	case "", "bwrap":
		j, err = sandbox.NewBwrap(scfg)
	case "nsjail":
		j, err = sandbox.NewNsjail(scfg)
	default:
		return nil, fmt.Errorf("--jail %q: use bwrap or nsjail", cfg.Jail)
	}
	if err != nil {
		return nil, err
	}
	egressPath := "the jail init forwards each job's proxy connections (this host may not enter a jail's network namespace: no CAP_SYS_ADMIN, or not hardened)"
	if l, ok := j.(interface{ ListensIn() bool }); ok && l.ListensIn() && !cfg.EgressForwardInJail {
		egressPath = "the host holds each job's proxy address in its jail (no process of the jail's own forwards)"
	}
	log.Info("jail ready", zap.String("jail", j.Describe()), zap.String("egress", egressPath))
	return j, nil
}

// openVolumes connects the volume store: S3 when configured, else the JetStream Object Store.
func openVolumes(ctx context.Context, cfg Config, js jetstream.JetStream, log *zap.Logger, reg prometheus.Registerer) (*objstore.Volumes, error) {
	o := cfg.Volumes
	if o.CacheDir == "" {
		o.CacheDir = filepath.Join(cfg.DataDir, "volume-cache")
	}
	if o.Log == nil {
		o.Log = log.Named("volumes")
	}
	if o.Registerer == nil {
		o.Registerer = reg
	}
	if o.Replicas == 0 {
		o.Replicas = cfg.Streams.Replicas
	}
	if o.Owner == nil && os.Geteuid() == 0 {
		// Jobs run as the jail user, who must be able to change what is synced in; a root
		// host reads and writes those files regardless.
		o.Owner = &objstore.Owner{UID: cfg.JailUID, GID: cfg.JailGID}
	}
	v, err := objstore.Open(ctx, js, cfg.S3, o)
	if err != nil {
		return nil, err
	}
	log.Info("volume store ready", zap.String("store", v.Store()), zap.String("cache", o.CacheDir))
	if err := recoverVolumes(ctx, v, log); err != nil {
		return nil, err
	}
	return v, nil
}

// recoverVolumes rebuilds the volume heads from the store when NATS knows none (a fresh NATS,
// or one that lost its data, on a bucket that kept them): otherwise the first run would start
// a volume's history again at version 1 beside its old versions. Failing to read the store is
// a failed start for the same reason.
func recoverVolumes(ctx context.Context, v *objstore.Volumes, log *zap.Logger) error {
	rep, ran, err := v.RecoverIfEmpty(ctx)
	if err != nil {
		return fmt.Errorf("volume store %s: NATS holds no volume heads, and recovering them from the store failed: %w (run `host volumes recover` once the store is reachable)", rep.Store, err)
	}
	if !ran || (len(rep.Volumes) == 0 && len(rep.Unmarked) == 0 && rep.Stray == 0) {
		return nil
	}
	log.Info("NATS held no volume heads: recovered them from the volume store", zap.String("store", rep.Store),
		zap.Int("found", len(rep.Volumes)), zap.Int("recovered", rep.Recovered), zap.Int("skipped", rep.Skipped),
		zap.Int("broken", rep.Broken), zap.Int("stray", rep.Stray), zap.Strings("unmarked", rep.Unmarked))
	return nil
}

// installJailInit writes the jail init (package jailinit), embedded in this binary, where the jail
// user can run it: the running binary may sit in a directory the jail user cannot enter. It also
// removes the copy of the whole host binary that earlier versions used as the init.
func installJailInit(dir string, log *zap.Logger) (*initbin.Installed, error) {
	in, err := initbin.Install(dir)
	if err != nil {
		return nil, fmt.Errorf("prepare the jail's egress init: %w (the default network, the egress proxy, needs it)", err)
	}
	if err := os.Remove(filepath.Join(dir, "host")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("could not remove the host binary copy earlier versions used as the jail init", zap.Error(err))
	}
	log.Debug("jail init ready", zap.String("path", in.Path), zap.String("sha256", in.SHA256))
	return in, nil
}

// newEgress makes the egress proxy with the host's CA (made in <data>/egress-ca at first start)
// and the roots it verifies terminated upstreams with.
func newEgress(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*egress.Proxy, error) {
	ca, err := egress.LoadCA(filepath.Join(cfg.DataDir, "egress-ca"))
	if err != nil {
		return nil, err
	}
	var roots *x509.CertPool
	if len(cfg.EgressCAFiles) > 0 {
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		for _, f := range cfg.EgressCAFiles {
			pem, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("--egress-ca-file: %w", err)
			}
			if !roots.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--egress-ca-file %s: no PEM certificate in it", f)
			}
		}
	}
	return egress.New(egress.Options{Log: log.Named("egress"), Registerer: reg, Permit: cfg.EgressPermit,
		CA: ca, RootCAs: roots, Resolve: cfg.EgressResolve}), nil
}

// startEngine makes the host's engine with what feeds it beside its subjects: the tracer, the
// event routers (S3 notifications) and the Postgres source, which start once the engine is up.
func startEngine(ctx context.Context, cfg Config, hc host.Config, nc *nats.Conn, js jetstream.JetStream, pg *postgres, log *zap.Logger, reg prometheus.Registerer) (*host.Host, error) {
	var err error
	if hc.Tracer == nil {
		if hc.Tracer, err = trace.New(ctx, trace.Config{Endpoint: cfg.OTLPEndpoint, HostID: cfg.HostID, Log: log.Named("trace"), Registry: reg}); err != nil {
			return nil, err
		}
	}
	routers, startRouters := eventRouters(cfg, js, hc.IDs, log)
	hc.Routers = append(hc.Routers, routers...)
	if pg != nil {
		hc.Served = pg.served
	}
	if hc.Check == nil {
		hc.Check = checker(cfg)
	}
	h, err := host.New(hc, nc, log, reg)
	if err != nil {
		return nil, err
	}
	startRouters(h)
	if pg != nil {
		pg.run(h)
	}
	return h, nil
}
