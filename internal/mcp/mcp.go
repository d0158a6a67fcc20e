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
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/signature"
)

// DefaultSessionTimeout closes a session no request has used for this long: sessions are held
// in the host's memory, and a client that went away says nothing.
const DefaultSessionTimeout = 30 * time.Minute

// cancelWait bounds how long canceling a job whose call was canceled may take.
const cancelWait = 15 * time.Second

// Config is what the MCP face serves. NC is required.
type Config struct {
	// NC is a connection to the hosts' NATS: tool calls are agent.calls on it.
	NC *nats.Conn
	// FunctionsDir is the functions directory the tools are read from.
	FunctionsDir string
	// All offers every function as a tool, `tool:` or not (serve --mcp-all).
	All bool
	// MaxBodyBytes bounds a request body; the SDK's default (4 MiB) when zero.
	MaxBodyBytes int64
	// SessionTimeout closes idle sessions; DefaultSessionTimeout when zero.
	SessionTimeout time.Duration
	// Version is the server version the face tells clients.
	Version string
	Log     *zap.Logger
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

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

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
		return next(ctx, method, req)
	}
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
	if s.cfg.FunctionsDir != "" {
		// Refused files are the host's to report (it logs each as it loads it); they are no tools.
		fns, _ = functions.Load(s.cfg.FunctionsDir)
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

// call is the handler of tool name's calls.
func (s *Server) call(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		t := s.offered(name)
		if t == nil {
			// Withdrawn between the SDK's lookup and here.
			return nil, fmt.Errorf("tool %q is no longer offered: its function was removed or no longer says tool:", name)
		}
		caller := s.caller
		if caller == "" {
			caller = callerOf(req.Session)
		}
		if err := s.rights(req.Params.Arguments); err != nil {
			s.log.Warn("tool call refused: it passes a secret its caller does not declare", zap.String("function", name), zap.String("caller", caller), zap.Error(err))
			return failure(err.Error(), "", ""), nil
		}
		raw, err := t.arguments(req.Params.Arguments)
		if err != nil {
			s.log.Info("tool call refused: its arguments do not fit main", zap.String("function", name), zap.String("caller", caller), zap.Error(err))
			return failure(err.Error(), "", ""), nil
		}
		return s.run(ctx, req, t, raw, caller)
	}
}

// rights refuses a job's tool call that passes a $secret: its own function does not declare.
// A tool call acts with its caller's rights, never the tool's: the tool's secrets: line says
// what the tool may receive from a caller entitled to it, and without this check a job with
// no secrets (an agent a prompt can steer) would have a tool that declares one resolve it and
// hand it back, transformed past any redaction. Checked before anything is published; the
// host that runs the call checks again from the caller's record (package host, rights.go).
// The calls of /mcp's own clients are not a job's and pass unchecked, as a NATS caller's do.
func (s *Server) rights(args json.RawMessage) error {
	if s.only == nil {
		return nil
	}
	var decoded map[string]any
	if json.Unmarshal(args, &decoded) != nil {
		return nil // not an object: arguments refuses it, in its own words
	}
	for _, name := range secrets.Refs(decoded) {
		if s.declares == nil || !s.declares(name) {
			return fmt.Errorf("secret %q refused: a tool call acts with its caller's rights, and function %q, which makes this call, does not declare %q; "+
				"add \"secrets: %s\" to %s's annotations if it should hold it: %w", name, s.callerFn, name, name, s.callerFn, secrets.ErrUndeclared)
		}
	}
	return nil
}

// arguments checks a call's arguments as the host checks a job's before it starts a jail
// (jobtype.DecodePayload, signature.Check), and for the parameters main requires: the same
// words, but before any job exists.
func (t *tool) arguments(args json.RawMessage) ([]byte, error) {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	raw, decoded, err := jobtype.DecodePayload(args)
	if err != nil {
		return nil, err
	}
	if err := t.fn.Signature.Check(raw); err != nil {
		return nil, err
	}
	var missing []string
	for _, p := range t.params {
		if _, ok := decoded[p.Name]; !ok && !p.Optional {
			missing = append(missing, fmt.Sprintf("%q", p.Name))
		}
	}
	if len(missing) > 0 {
		noun := "argument"
		if len(missing) > 1 {
			noun = "arguments"
		}
		return nil, fmt.Errorf("missing required %s %s for %s", noun, strings.Join(missing, ", "), t.header())
	}
	return raw, nil
}

// header is main's parameter list as a message shows it: main(text, top=3).
func (t *tool) header() string {
	var ps []string
	for _, p := range t.params {
		switch {
		case p.Default != "":
			ps = append(ps, p.Name+"="+p.Default)
		case p.Optional:
			ps = append(ps, p.Name+"?")
		default:
			ps = append(ps, p.Name)
		}
	}
	return "main(" + strings.Join(ps, ", ") + ")"
}

// callerOf names the MCP client of a session, as its initialize said: what the job's record
// keeps as its caller.
func callerOf(ss *sdk.ServerSession) string {
	if ss != nil {
		if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
			if p.ClientInfo.Version != "" {
				return "mcp " + p.ClientInfo.Name + "/" + p.ClientInfo.Version
			}
			return "mcp " + p.ClientInfo.Name
		}
	}
	return "mcp client"
}

// run makes the call an agent.call of the function and answers with its job's outcome.
func (s *Server) run(ctx context.Context, req *sdk.CallToolRequest, t *tool, raw []byte, caller string) (*sdk.CallToolResult, error) {
	name := t.fn.Name
	id := ids.New()
	log := s.log.With(zap.String("function", name), zap.String("job_id", id), zap.String("caller", caller))
	m := nats.NewMsg(bus.CallSubject(name))
	m.Data = raw
	m.Header.Set(bus.HeaderMsgID, id)
	m.Header.Set(bus.HeaderCaller, caller)
	for k, v := range s.lineage {
		m.Header[k] = v
	}
	if s.ended != nil {
		// A job's tool call does not outlive the job: its end cancels the call, and so its job.
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		defer context.AfterFunc(s.ended, stop)()
	}

	logsDone := func() {}
	if token := req.Params.GetProgressToken(); token != nil {
		wait, stop, err := s.progress(ctx, req.Session, token, name, id)
		if err != nil {
			log.Warn("tool call: its log cannot be followed; it runs without progress", zap.Error(err))
		} else {
			defer stop()
			logsDone = wait
		}
	}
	log.Debug("tool call")
	if s.only != nil {
		s.mu.Lock()
		s.pending[id] = true
		s.mu.Unlock()
	}
	reply, err := s.replies.request(ctx, s.cfg.NC, m)
	if err == nil && s.only != nil {
		// Unanswered calls stay pending: one whose caller went away (the job's timeout killed
		// it) is what Unstarted asks about.
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}
	if err != nil {
		if ctx.Err() != nil {
			s.cancel(id, caller, log)
			return nil, ctx.Err()
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return failure("no host is running: the job cannot be queued; start `host serve`", "", ""), nil
		}
		log.Warn("tool call: no answer from the hosts", zap.Error(err))
		return nil, fmt.Errorf("call %s: %w", name, err)
	}
	logsDone()
	status := reply.Header.Get(bus.HeaderJobStatus)
	if jid := reply.Header.Get(bus.HeaderJobID); jid != "" {
		id = jid
	}
	if status != string(jobtype.Succeeded) {
		var ev jobs.ErrorEvent
		msg := string(reply.Data)
		if json.Unmarshal(reply.Data, &ev) == nil && ev.Error != "" {
			msg = ev.Error
		}
		log.Info("tool call: the job did not succeed", zap.String("status", status), zap.String("error", msg))
		return failure(msg, id, status), nil
	}
	log.Info("tool call answered")
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(reply.Data)}}, Meta: sdk.Meta{"job_id": id, "status": status}}
	if isObject(reply.Data) {
		res.StructuredContent = json.RawMessage(reply.Data)
	}
	return res, nil
}

// failure is a tool result that says the call failed, for the model to read.
func failure(msg, id, status string) *sdk.CallToolResult {
	res := &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
	if id != "" {
		res.Meta = sdk.Meta{"job_id": id, "status": status}
	}
	return res
}

func isObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return json.Valid(b)
		}
		return false
	}
	return false
}

// cancel cancels the job of a call the client canceled (or left), as `host cancel` does: queued
// or running, it ends canceled, and its record says by whom.
func (s *Server) cancel(id, caller string, log *zap.Logger) {
	ctx, stop := context.WithTimeout(context.Background(), cancelWait)
	defer stop()
	c, err := s.c.Get(ctx)
	if err != nil {
		log.Warn("tool call canceled, but its job cannot be: the job store is not reachable", zap.Error(err))
		return
	}
	by := caller + " (MCP cancellation)"
	// The host that took the call writes its queued record without waiting: a cancel that
	// comes first finds no job yet, and tries again.
	for wait := 20 * time.Millisecond; ; wait *= 2 {
		_, err = c.CancelAs(ctx, id, by)
		if !errors.Is(err, client.ErrUnknownJob) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	var fin *client.FinishedError
	switch {
	case err == nil:
		log.Info("tool call canceled: its job is canceled")
	case errors.As(err, &fin):
		log.Info("tool call canceled after its job had ended", zap.Error(err))
	default:
		log.Warn("tool call canceled, but canceling its job failed", zap.Error(err))
	}
}

// progress sends each log line of job id as a progress notification on the call's stream. wait
// waits, briefly, for the lines the job logged before it answered; stop ends the following.
func (s *Server) progress(ctx context.Context, ss *sdk.ServerSession, token any, name, id string) (wait, stop func(), err error) {
	c, err := s.c.Get(ctx)
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	n := 0
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := c.FollowJob(fctx, name, id, func(l client.LogLine) {
			mu.Lock()
			n++
			p := &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: l.Text}
			mu.Unlock()
			if err := ss.NotifyProgress(fctx, p); err != nil && fctx.Err() == nil {
				s.log.Debug("progress notification not sent", zap.String("job_id", id), zap.Error(err))
			}
		})
		if err != nil && fctx.Err() == nil {
			s.log.Debug("job log not followed to its end", zap.String("job_id", id), zap.Error(err))
		}
	}()
	wait = func() {
		// The answer came; the record that says which line was the last is written right
		// after it. A log that cannot be read to its end is not worth holding the answer for.
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	stop = func() {
		cancel()
		<-done
	}
	return wait, stop, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// JobTools mints the MCP endpoints of jobs whose function declares tools: (runner.Tools): each
// offers exactly the functions the line names, whether they say tool: or not, to a bearer
// token made for that job alone, and makes each call a job of its own in the calling job's
// flow (its Flow-Id, the calling job as its parent, one hop more, and one Tool-Depth more, so
// that the host's bound on nested calls, --tool-depth, stops a chain that spans hosts; cycles
// among one directory's functions are refused at load). The record of such a call names the
// calling job as its caller. A call acts with the calling job's rights: a $secret: its function
// does not declare is refused before anything is published (see rights). Closing an endpoint
// (the job ended) refuses its token from then on and cancels its unfinished calls.
type JobTools struct {
	cfg Config
}

// NewJobTools serves jobs' tools from cfg's functions directory over cfg's NATS.
func NewJobTools(cfg Config) *JobTools {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &JobTools{cfg: cfg}
}

// jobSessionTimeout closes a job's idle MCP sessions: a job that is done with its tools, or
// that ended without saying so, leaves them behind.
const jobSessionTimeout = time.Minute

// Open is runner.Tools.Open.
func (jt *JobTools) Open(job jobtype.ToolsJob, names []string) (http.Handler, string, func()) {
	cfg := jt.cfg
	cfg.SessionTimeout = jobSessionTimeout
	cfg.Log = cfg.Log.With(zap.String("for_job", job.ID), zap.String("for_function", job.Function))
	s := New(cfg)
	s.only, s.pending = map[string]bool{}, map[string]bool{}
	for _, n := range names {
		s.only[n] = true
	}
	s.caller = "job " + job.ID + " (" + job.Function + ")"
	s.callerFn, s.declares = job.Function, job.Declares
	s.lineage = nats.Header{}
	s.lineage.Set(bus.HeaderFlowID, job.FlowID)
	s.lineage.Set(bus.HeaderParentJob, job.ID)
	s.lineage.Set(bus.HeaderHop, strconv.Itoa(job.Hop+1))
	s.lineage.Set(bus.HeaderToolDepth, strconv.Itoa(job.ToolDepth+1))
	ended, end := context.WithCancel(context.Background())
	s.ended = ended
	endpoint := &jobEndpoint{s: s}
	var secret [32]byte
	rand.Read(secret[:]) // never fails on Linux
	token := hex.EncodeToString(secret[:])
	endpoint.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case ended.Err() != nil:
			http.Error(w, fmt.Sprintf("this token was made for job %s, which has ended", job.ID), http.StatusUnauthorized)
		case subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1:
			http.Error(w, "this endpoint needs the job's token: send Authorization: Bearer $HOST_MCP_TOKEN", http.StatusUnauthorized)
		default:
			s.ServeHTTP(w, r)
		}
	})
	return endpoint, token, func() {
		end()
		s.replies.close()
	}
}

// jobEndpoint is a job's MCP endpoint: its handler, and what it tells the runner of its calls
// (runner.UnstartedCalls).
type jobEndpoint struct {
	http.Handler
	s *Server
}

// Unstarted is runner.UnstartedCalls: the job's unanswered calls whose jobs have not started
// (queued, waiting for a retry, or canceled before they ran), as "<id> (<function>)". A job that
// timed out waiting on one of them would wait the same way if it were retried. A call the job
// gave up on itself (its own cancellation) before its job ran counts too: the endpoint cannot
// tell that from the jail's end cutting the call off, and the job did wait on it.
func (e *jobEndpoint) Unstarted(ctx context.Context) []string {
	s := e.s
	s.mu.Lock()
	ids := sortedKeys(s.pending)
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	c, err := s.c.Get(ctx)
	if err != nil {
		s.log.Warn("cannot read whether the job's tool calls had started: the job store is not reachable", zap.Error(err))
		return nil
	}
	var out []string
	for _, id := range ids {
		rec, err := c.Jobs.Get(ctx, id)
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			out = append(out, id) // published, its queued record not written (yet)
		case err != nil:
			s.log.Warn("cannot read whether a tool call had started", zap.String("job_id", id), zap.Error(err))
		case rec.Status == jobtype.Queued || rec.Status == jobtype.Retrying || rec.Started.IsZero():
			out = append(out, id+" ("+rec.Function+")")
		}
	}
	return out
}
