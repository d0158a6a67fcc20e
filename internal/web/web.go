// Package web is the host's HTTP face: GET /healthz, GET /metrics, POST /hooks/{source},
// POST /run/{name}, /mcp (package mcp: functions as MCP tools) and the dashboard at every other path, all behind the web guard (package
// webauth), which leaves webhooks to their own authorization; and the signed approval links
// (/approvals/{job}), which carry theirs. It holds no job state of its
// own: what it says about the engine it asks through Engine, and jobs it queues and reads
// through NATS (package client), exactly as `host invoke` does. Every route is mounted in New,
// so that what a new one (a future /mcp) is guarded by is decided where the others' is.
package web

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/dashboard"
	"github.com/agenthost/host/internal/mcp"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/webauth"
)

// Engine is what the web face asks of the job engine it fronts. *host.Host is one.
type Engine interface {
	// Ready reports whether the engine takes jobs; Draining whether it stopped for good, so
	// that /healthz can tell a host shutting down from one not connected yet.
	Ready() bool
	Draining() bool
	// Serves reports whether some host serves the function name: POST /run refuses one that
	// none does rather than queue a job for nobody, as agent.call does.
	Serves(ctx context.Context, name string) bool
	// ServedNames lists the functions served by the engine or another host, sorted, for the
	// 404 of an unknown name.
	ServedNames(ctx context.Context) []string
	// StoreRefusal says why JetStream's store refuses writes, nil while it takes them:
	// /healthz reports it, and POST /run refuses a job it could not queue.
	StoreRefusal() *bus.StoreRefusal
}

// DefaultQueueTimeout is Config.QueueTimeout when zero: the host's default ack wait, which
// bounds how long agent.call may take to queue a job too.
const DefaultQueueTimeout = 30 * time.Second

// Config is what the web face serves. Engine and NC are required; every other zero value says
// what it stands for.
type Config struct {
	// Engine answers /healthz and which functions are served.
	Engine Engine
	// NC is a connection to the engine's NATS: POST /run queues and follows jobs through it,
	// and the dashboard reads through it.
	NC *nats.Conn
	// FunctionsDir is the engine's functions directory; the dashboard's functions page reads
	// annotations and refusals from it.
	FunctionsDir string
	// FunctionsDirOf, when set, names the directory to read at each use instead of
	// FunctionsDir: what the engine serves now (serve --deployed: the materialised deployment).
	FunctionsDirOf func() string
	// Volumes is the volume store the dashboard's volume pages read and restore; when nil they
	// say there is none.
	Volumes *objstore.Volumes
	// Hooks serves POST /hooks/{source}; when nil the host takes no webhooks (404).
	Hooks http.Handler
	// Metrics is what GET /metrics exposes; when nil it exposes no series.
	Metrics prometheus.Gatherer
	// Auth guards everything but the webhooks and the approval links: the web token, the
	// stored users and the OpenID provider that log people in, and whether the face listens on
	// loopback only. Every route is then checked against webauth.Routes.
	Auth webauth.Config
	// RunMaxBytes bounds a POST /run body; DefaultRunMaxBytes when zero.
	RunMaxBytes int64
	// QueueTimeout bounds how long POST /run may take to look the function up and queue its
	// job (not how long ?wait= waits); DefaultQueueTimeout when zero.
	QueueTimeout time.Duration
	// Log is the engine's logger: what the face does is logged beside the jobs it starts.
	Log *zap.Logger
	// Sign signs with the hosts' key (ids.Key.Derive), to check the approval links the engine
	// announces; when nil every such link is refused.
	Sign func(parts ...string) string
	// MCPAll offers every function as a tool on /mcp, not only those that say tool:
	// (serve --mcp-all).
	MCPAll bool
	// TraceURL links the dashboard's job and flow pages to their traces (serve --trace-url).
	TraceURL string
}

// New builds the web face. It reads nothing yet: the job bucket may not exist until the engine
// has started, so what needs it is opened on the first request.
func New(cfg Config) http.Handler {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	if cfg.RunMaxBytes <= 0 {
		cfg.RunMaxBytes = DefaultRunMaxBytes
	}
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = DefaultQueueTimeout
	}
	mux := http.NewServeMux()
	// Every route is checked against what webauth.Routes says it needs, for the principal the
	// guard let the request through as.
	handle := func(pattern string, h http.Handler) {
		mux.Handle(pattern, webauth.Require(pattern, h, nil, cfg.Log))
	}
	handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { health(w, cfg.Engine) }))
	handle("GET /metrics", promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{}))
	if cfg.Hooks != nil {
		handle("POST /hooks/{source}", cfg.Hooks)
	}
	handle("POST /run/{name}", &run{cfg: cfg, c: client.Lazy{NC: cfg.NC}})
	// MCP clients hold the token as a bearer header, as POST /run callers do.
	handle("/mcp", mcp.New(mcp.Config{NC: cfg.NC, FunctionsDir: cfg.FunctionsDir, FunctionsDirOf: cfg.FunctionsDirOf, All: cfg.MCPAll, MaxBodyBytes: cfg.RunMaxBytes, Log: cfg.Log}))
	dcfg := dashboard.Config{NC: cfg.NC, FunctionsDir: cfg.FunctionsDir, FunctionsDirOf: cfg.FunctionsDirOf, Volumes: cfg.Volumes, Log: cfg.Log, RunMaxBytes: cfg.RunMaxBytes, TraceURL: cfg.TraceURL}
	if hs, ok := cfg.Hooks.(dashboard.HookSources); ok {
		dcfg.Hooks = hs
	}
	if cfg.Auth.Users != nil {
		dcfg.Users = cfg.Auth.Users
	}
	if dr, ok := cfg.Engine.(dashboard.Drafts); ok {
		dcfg.Drafts = dr
	}
	dash := dashboard.New(dcfg)
	// Any other method on /run/{name} is a 405 saying it takes POST, not the dashboard's 404.
	handle("/run/{name}", dash.MethodNotAllowed(http.MethodPost))
	handle("/", dash)
	// The approval links carry their own authority (a signature, an expiry), for people who have
	// no login: outside the guard, as webhooks are.
	outer := http.NewServeMux()
	outer.Handle("/approvals/{job}", webauth.Require("/approvals/{job}", &approvals{cfg: cfg}, nil, cfg.Log))
	outer.Handle("/", webauth.New(cfg.Auth, cfg.Log.Named("web")).Wrap(mux))
	return outer
}

// health answers GET /healthz: 200 only while the engine takes jobs, so that a load balancer
// or an orchestrator stops sending work to a host that cannot run it.
func health(w http.ResponseWriter, e Engine) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case e.Draining():
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"draining"}` + "\n"))
	case !e.Ready():
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"starting or disconnected from NATS"}` + "\n"))
	default:
		if r := e.StoreRefusal(); r != nil {
			// Not ready for work: a trigger would be refused and a job could commit nothing.
			w.WriteHeader(http.StatusServiceUnavailable)
			body, _ := json.Marshal(map[string]string{"status": "store refuses writes", "reason": r.Reason,
				"since": r.Since.UTC().Format(time.RFC3339), "action": bus.StoreRefusalAdvice})
			w.Write(append(body, '\n'))
			return
		}
		w.Write([]byte(`{"status":"ok"}` + "\n"))
	}
}
