// Package mcp is the host's Model Context Protocol face: /mcp, the streamable HTTP transport of
// the official Go SDK, which offers functions as tools to agents (Claude Code, Cursor, an Agent
// SDK). A function is a tool when its script says `tool:` (or serve runs with --mcp-all); the
// tool's input schema is main's signature (package signature), its description the `tool:`
// line's or the script's doc comment (annot.Doc).
//
// A tools/call is an agent.call of the function, exactly as a NATS caller makes one: the same
// job (queued, jailed, recorded, retried, answered by whichever host runs it), whose record
// names the MCP client as its caller. Its log lines come back as progress notifications when
// the client asked for progress; its result as structuredContent (when it is an object) and a
// text block; a failure as isError with the job's error. A cancellation of the call cancels
// the job, as `host cancel` does. Arguments that do not fit main's signature are refused before
// any job exists, in the words the host uses when it refuses them itself.
//
// The tool list is the functions directory as it is when a client lists it: a function added,
// changed or removed since (the host reloads the directory as it changes) is listed as it is
// now, and the sessions are told (notifications/tools/list_changed).
package mcp

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/signature"
)

// DefaultSessionTimeout closes a session no request has used for this long: sessions are held
// in the host's memory, and a client that went away says nothing.
const DefaultSessionTimeout = 30 * time.Minute

// Config is what the MCP face serves. NC is required.
type Config struct {
	// NC is a connection to the hosts' NATS: tool calls are agent.calls on it.
	NC *nats.Conn
	// FunctionsDir is the functions directory the tools are read from.
	FunctionsDir string
	// FunctionsDirOf, when set, names the directory to read at each use instead: what the host
	// serves now (under serve --deployed the deployment materialised, which changes with each
	// deploy; host.Host.FunctionsDir).
	FunctionsDirOf func() string
	// All offers every function as a tool, `tool:` or not (serve --mcp-all).
	All bool
	// MaxBodyBytes bounds a request body; the SDK's default (4 MiB) when zero.
	MaxBodyBytes int64
	// SessionTimeout closes idle sessions; DefaultSessionTimeout when zero.
	SessionTimeout time.Duration
	// Version is the server version the face tells clients.
	Version string
	Log     *zap.Logger
	// Sign signs with the hosts' key (ids.Key.Derive) who starts each call's job ("MCP client
	// <name>", or a job's flow step); nil asks a host to (client.Start.AskHost), which NC then
	// must be connected as the hosts user to.
	Sign func(parts ...string) string
}

// functionsDir is the directory the tools are read from now.
func (c Config) functionsDir() string {
	if c.FunctionsDirOf != nil {
		return c.FunctionsDirOf()
	}
	return c.FunctionsDir
}

// Server serves /mcp.
type Server struct {
	cfg     Config
	log     *zap.Logger
	srv     *sdk.Server
	handler http.Handler

	syncMu sync.Mutex       // one load of the directory at a time
	mu     sync.Mutex       // guards tools
	tools  map[string]*tool // what the SDK server offers now, by name
	c      client.Lazy      // opened on first use: the job bucket exists once a host started

	replies replies
	posts   posts // the HTTP requests being served: a call ends with the one that brought it

	// For a job's own endpoint (JobTools): the functions it offers whether they say tool: or
	// not, who its calls are made by, the trigger headers that put them in the job's flow, and
	// what ends them (the job's end).
	only    map[string]bool
	caller  string
	lineage nats.Header
	ended   context.Context
	// callerFn and declares are the calling job's function and the secrets it declares: a
	// job's call may pass only those as $secret: (see rights).
	callerFn string
	declares func(name string) bool
	// callerJob and starter are the calling job's id and its flow's starter, for a job's
	// endpoint: its calls are steps of that flow.
	callerJob, starter string
	// pending are the ids of the job's calls that were published and not answered (guarded by
	// mu): what Unstarted looks at when the job times out.
	pending map[string]bool
}

// tool is a function offered as a tool, and what its calls are checked with.
type tool struct {
	fn      *functions.Function
	params  []signature.Param // every named parameter of main, for the missing-argument check
	version string            // the function's hash and description: what a change is told by
}

// New builds the face. It reads the functions directory on the first request, not now.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Server{cfg: cfg, log: cfg.Log.Named("mcp"), tools: map[string]*tool{}, c: client.Lazy{NC: cfg.NC}}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "agent-host", Title: "agent host functions", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: "Each tool is a function of this host: a call runs it as a job in its own jail and answers with its result. " +
			"A failed job answers with isError and the job's error; the job id is in the result's _meta (job_id).",
		HasTools: true,
	})
	s.srv.AddReceivingMiddleware(s.follow)
	s.handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		SessionTimeout:               cfg.SessionTimeout,
		MaxRequestBodyBytes:          cfg.MaxBodyBytes,
		PropagateRequestCancellation: true,
		// The web guard in front (package webauth) answers DNS rebinding already: without a
		// token only loopback names are served, and with one a rebound page holds no token.
		// The SDK's own check would refuse the names the guard lets through on loopback
		// (host.localhost, which the dashboard's cookies want).
		DisableLocalhostProtection: true,
	})
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	withPrincipal(r)
	defer s.posts.track(r)()
	s.handler.ServeHTTP(w, r)
}

// follow keeps the tools in step with the functions directory: on every tools/list, and on a
// tools/call of a name not offered yet (a function added since the last list).
func (s *Server) follow(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		switch method {
		case "tools/list":
			s.sync()
		case "tools/call":
			if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok && s.offered(p.Name) == nil {
				s.sync()
			}
		}
		res, err := next(ctx, method, req)
		if list, ok := res.(*sdk.ListToolsResult); ok && err == nil {
			s.narrow(list, req)
		}
		return res, err
	}
}

// narrow leaves out of a tools/list the tools whose functions the login may not run (a
// runner's --functions glob): calling them would be refused (mayCall).
func (s *Server) narrow(list *sdk.ListToolsResult, req sdk.Request) {
	kept := list.Tools[:0]
	for _, tl := range list.Tools {
		t := s.offered(tl.Name)
		if t == nil || mayCall(req.GetExtra(), t.fn.Name) == nil {
			kept = append(kept, tl)
		}
	}
	list.Tools = kept
}

func (s *Server) offered(name string) *tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools[name]
}

// sync loads the functions directory and offers what it now holds: new and changed tools
// added, removed ones withdrawn. The SDK tells every session of a change.
func (s *Server) sync() {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	fns := map[string]*functions.Function{}
	if dir := s.cfg.functionsDir(); dir != "" {
		// Refused files are the host's to report (it logs each as it loads it); they are no tools.
		fns, _ = functions.Load(dir)
	}
	want := map[string]*tool{}
	defs := map[string]*sdk.Tool{}
	for name, fn := range fns {
		switch {
		case s.only != nil:
			if !s.only[name] {
				continue
			}
		case !s.cfg.All && fn.Spec.Tool == nil:
			continue
		}
		def, t, err := describe(fn)
		if err != nil {
			s.log.Warn("function not offered as a tool: its source cannot be read", zap.String("function", name), zap.Error(err))
			continue
		}
		want[name], defs[name] = t, def
	}
	s.mu.Lock()
	var gone []string
	for name := range s.tools {
		if want[name] == nil {
			gone = append(gone, name)
		}
	}
	var changed []string
	for name, t := range want {
		if cur := s.tools[name]; cur == nil || cur.version != t.version {
			changed = append(changed, name)
		}
	}
	s.tools = want
	s.mu.Unlock()
	sort.Strings(changed)
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
	for _, name := range changed {
		s.srv.AddTool(defs[name], s.call(name))
	}
	if len(gone)+len(changed) > 0 {
		s.log.Info("tools changed", zap.Strings("offered", sortedKeys(want)), zap.Strings("added_or_changed", changed), zap.Strings("withdrawn", gone))
	}
}

// describe is fn as a tool: its definition for tools/list, and what a call is checked with.
func describe(fn *functions.Function) (*sdk.Tool, *tool, error) {
	entry := fn.Root
	if fn.Folder {
		entry = filepath.Join(fn.Root, fn.Entry)
	}
	src, err := os.ReadFile(entry)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", entry, err)
	}
	desc := ""
	if fn.Spec.Tool != nil {
		desc = fn.Spec.Tool.Description
	}
	if desc == "" {
		desc = annot.Doc(entry, src)
	}
	if desc == "" {
		desc = fmt.Sprintf("Runs the function %s (%s) on the host, in a jail of its own, and answers with its result.", fn.Name, fn.Runtime)
	}
	def := &sdk.Tool{Name: fn.Name, Description: desc, InputSchema: signature.InputSchema(fn.Runtime, src)}
	if out := signature.OutputSchema(fn.Runtime, src); out != nil {
		def.OutputSchema = out
	}
	return def, &tool{fn: fn, params: signature.Fields(fn.Runtime, src), version: fn.Hash + "\x00" + desc}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
