package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
)

// cancelWait bounds how long canceling a job whose call was canceled may take.
const cancelWait = 15 * time.Second

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
		if err := mayCall(req.Extra, t.fn.Name); err != nil {
			s.log.Info("tool call refused: the login may not run its function", zap.String("function", name), zap.String("caller", caller), zap.Error(err))
			return failure(err.Error(), "", ""), nil
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

// startOf is who starts a call's job: the MCP client, or, on a job's endpoint, a step of the
// calling job's flow, whose starter it carries on.
func (s *Server) startOf(caller string) client.Start {
	name := strings.TrimPrefix(caller, "mcp ")
	if caller == "mcp client" {
		name = "(it gave no name)"
	}
	st := client.Start{By: "MCP client " + name, Sign: s.cfg.Sign, AskHost: true}
	if s.callerJob != "" {
		st.By, st.Starter = "flow step "+s.callerFn+" (job "+s.callerJob+")", s.starter
	}
	return st
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
	if err := client.Stamp(ctx, s.cfg.NC, m, s.startOf(caller)); err != nil {
		log.Warn("tool call: who starts it is recorded as a claim", zap.Error(err))
	}
	// A client that goes away takes its call with it, as an abort does (posts).
	ctx, stopWatch := s.endWithRequest(ctx, req)
	defer stopWatch()
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
