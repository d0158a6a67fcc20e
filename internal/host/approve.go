package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/route"
)

// Approvals. A step with approve: that succeeds does not start its next steps: its record goes
// waiting, with its result, its arguments and when the approval expires; its result is
// published on agent.result.<fn> as any, an announcement on agent.approval.<fn>, and a timer
// (a trigger of its own, waiting in the stream until the expiry). A decision is an agent.call
// of the function carrying the Approval-* headers (host approve, the dashboard, a signed link),
// which whichever host takes it settles: approved, the next steps get the result with the
// approval in it and the record says succeeded; rejected, or timed out when the timer comes up
// first, the step fails as any does (dead letter, error event, record saying why). Every
// settlement is a move of the record from waiting, so one decision wins and a second is told
// the step is no longer waiting.

// ApprovalEvent is what agent.approval.<fn> carries: enough for a function that notifies
// people (on: agent.approval.>) to ask them.
type ApprovalEvent struct {
	JobID      string          `json:"job_id"`
	FlowID     string          `json:"flow_id"`
	Function   string          `json:"function"`
	Result     json.RawMessage `json:"result"`
	ApproveURL string          `json:"approve_url,omitempty"`
	RejectURL  string          `json:"reject_url,omitempty"`
	Expires    time.Time       `json:"expires"`
	// Staged (approve: ... stage) summarizes the volume changes the decision promotes or
	// discards: per volume, the counts and names of the files added, removed and changed.
	Staged []jobs.StagedVolume `json:"staged,omitempty"`
}

// The decisions a caller may send, and the one only the timer can.
const (
	decideApprove = "approve"
	decideReject  = "reject"
	decideTimeout = "timeout"
)

// ApprovalLink is the signed link that decides job's approval without a login: a GET shows the
// decision to confirm, a POST makes it. Only the hosts' key signs it, and it carries its expiry.
func ApprovalLink(base string, sign func(parts ...string) string, job, decision string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return fmt.Sprintf("%s/approvals/%s?decision=%s&expires=%s&sig=%s", base, job, decision, exp, sign("approval-link", job, decision, exp))
}

// publishApproval publishes a waiting step's result, arms its timer and announces it; it
// returns the approval its record keeps and the subjects it published on.
func (h *Host) publishApproval(ctx context.Context, j *job, e end) (*jobs.Approval, []string, error) {
	fn := j.s.fn
	result := h.outMsg(bus.ResultSubject(fn.Name), e.result, j.rec)
	result.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "result"))
	h.vouchStep(result, j.rec)
	if err := h.publish(ctx, result); err != nil {
		return nil, nil, fmt.Errorf("publish on %s: %w", result.Subject, err)
	}
	a := &jobs.Approval{Expires: time.Now().Add(fn.Spec.Approve.Timeout).Truncate(time.Second), Groups: fn.Spec.Approve.Groups,
		Stage: fn.Spec.Approve.Stage, Staged: j.staged}
	timer := h.outMsg(bus.RunSubject(fn.Name), []byte("{}"), j.rec)
	timer.Header.Set(bus.HeaderMsgID, h.ids.Derive("approval-timeout", j.rec.ID))
	timer.Header.Set(bus.HeaderApprovalOf, j.rec.ID)
	timer.Header.Set(bus.HeaderApprovalDecision, decideTimeout)
	h.signDeployment(timer)
	ack, err := h.js.PublishMsg(ctx, timer)
	if err != nil {
		return nil, nil, fmt.Errorf("arm the approval's timeout: %w", err)
	}
	a.Timer = ack.Sequence
	ev := ApprovalEvent{JobID: j.rec.ID, FlowID: j.rec.FlowID, Function: fn.Name, Result: e.result, Expires: a.Expires, Staged: a.Staged}
	if base := h.cfg.ApprovalURL; base != "" {
		ev.ApproveURL = ApprovalLink(base, h.ids.Derive, j.rec.ID, decideApprove, a.Expires)
		ev.RejectURL = ApprovalLink(base, h.ids.Derive, j.rec.ID, decideReject, a.Expires)
	}
	body, _ := json.Marshal(ev)
	announce := h.outMsg(bus.ApprovalSubject(fn.Name), body, j.rec)
	announce.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "approval"))
	h.vouchStep(announce, j.rec)
	if err := h.publish(ctx, announce); err != nil {
		return nil, nil, fmt.Errorf("announce the approval on %s: %w", announce.Subject, err)
	}
	return a, []string{result.Subject, announce.Subject}, nil
}

// decideApproval settles a decision a host made (decisionOf): a face's, or the timer's.
func (h *Host) decideApproval(j *job) end {
	hdr := j.msg.Headers()
	target, decision := hdr.Get(bus.HeaderApprovalOf), hdr.Get(bus.HeaderApprovalDecision)
	by, comment := abbreviate(hdr.Get(bus.HeaderApprovalBy), 200), abbreviate(hdr.Get(bus.HeaderApprovalComment), 2000)
	timer := hdr.Get(bus.HeaderMsgID) == h.ids.Derive("approval-timeout", target)
	ctx, cancel := context.WithTimeout(context.Background(), outputWait)
	defer cancel()
	var rec *jobs.Record
	var err error
	switch {
	case decision == decideTimeout && !timer:
		err = errors.New("only the approval's own timer can time it out; decide with approve or reject")
	case decision != decideApprove && decision != decideReject && decision != decideTimeout:
		err = fmt.Errorf("decision %q: it is approve or reject", decision)
	default:
		if by == "" {
			by = "someone"
		}
		var due time.Time
		rec, due, err = h.settleApproval(ctx, j, target, decision, by, comment)
		if !due.IsZero() {
			return end{verdict: waiting, due: due}
		}
	}
	if timer {
		if err != nil && !errors.Is(err, errNotWaiting) {
			return h.joinRetry(j, err) // the store did not answer: the timer comes again
		}
		return end{verdict: decided}
	}
	if err != nil {
		h.log.Warn("approval decision refused", zap.String("function", j.s.fn.Name), zap.String("job_id", target), zap.String("by", by), zap.Error(err))
		if decision == decideApprove || decision == decideReject {
			// Checked and queued by a host, then lost to another decision (or the timer).
			h.audit(audit.Entry{Who: by, Face: "host", Act: "approval." + decision, Target: target,
				Detail: "function " + j.s.fn.Name + "; refused when it came to be settled", Error: err.Error()})
		}
		h.respond(j.replyMsg(), target, "", errorBody(&jobs.Record{ID: target, Function: j.s.fn.Name}, err.Error(), ""), string(jobtype.Failed))
		return end{verdict: decided}
	}
	body, _ := json.Marshal(rec)
	h.respond(j.replyMsg(), rec.ID, rec.FlowID, body, "decided")
	return end{verdict: decided}
}

// errNotWaiting is a decision on a step that is not waiting for one.
var errNotWaiting = errors.New("it is not waiting for a decision")

// waitingApproval reads job target's record for a decision: an error wrapping errNotWaiting
// when it is not waiting for one, or due when the decision must come back later.
func (h *Host) waitingApproval(ctx context.Context, j *job, target, decision string) (*jobs.Record, jobs.Version, time.Time, error) {
	var none jobs.Version
	rec, at, err := h.jobs.GetRev(ctx, target)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return nil, none, time.Time{}, fmt.Errorf("job %s: %w: %w", target, jobs.ErrNotFound, errNotWaiting)
	case err != nil:
		return nil, none, time.Time{}, err
	case rec.Function != j.s.fn.Name:
		return nil, none, time.Time{}, fmt.Errorf("job %s is a job of %s, not of %s: %w", target, rec.Function, j.s.fn.Name, errNotWaiting)
	case rec.Status == jobtype.Running:
		// The timer and the announcement go out before the record says waiting: a decision
		// (or the timer) that came up first comes back shortly.
		return nil, none, time.Now().Add(joinWait), nil
	case rec.Status != jobtype.Waiting || rec.Approval == nil:
		return nil, none, time.Time{}, fmt.Errorf("job %s is %s: %w", target, rec.Status, errNotWaiting)
	case decision == decideTimeout && time.Now().Before(rec.Approval.Expires):
		return nil, none, rec.Approval.Expires, nil
	}
	return rec, at, time.Time{}, nil
}

// settleApproval settles job target's approval as decision says. due is set when the timer
// came up before the expiry: it waits until then.
func (h *Host) settleApproval(ctx context.Context, j *job, target, decision, by, comment string) (*jobs.Record, time.Time, error) {
	fn := j.s.fn
	rec, at, due, err := h.waitingApproval(ctx, j, target, decision)
	if err != nil || !due.IsZero() {
		return nil, due, err
	}
	var held *objstore.Held
	if len(rec.Approval.Staged) > 0 {
		// The decision holds the staged volumes' leases while it promotes or discards them and
		// records itself, so that a second decision (on another host, say) waits and then finds
		// the step decided: the record is read again under them.
		if held, err = h.holdStaged(ctx, rec); err != nil {
			return nil, time.Time{}, err
		}
		defer held.Release(context.WithoutCancel(ctx))
		if rec, at, due, err = h.waitingApproval(ctx, j, target, decision); err != nil || !due.IsZero() {
			return nil, due, err
		}
	}
	step := &job{s: j.s, rec: rec, ver: at}
	now := time.Now()
	a := *rec.Approval
	a.By, a.Comment, a.At = by, comment, now
	var cause error
	switch decision {
	case decideApprove:
		a.Decision = jobs.Approved
	case decideReject:
		a.Decision = jobs.Rejected
		cause = fmt.Errorf("rejected by %s", by)
		if comment != "" {
			cause = fmt.Errorf("rejected by %s: %s", by, comment)
		}
	default:
		a.By, a.At = "", time.Time{}
		cause = fmt.Errorf("no decision came within its approve: timeout of %s; the approval timed out", fn.Spec.Approve.Timeout)
	}
	final := *rec
	final.Approval, final.Finished = &a, now
	if cause == nil {
		routes, err := fn.Routes.Route(rec.Result, rec.Args)
		if err != nil {
			err = jobtype.Terminal(err)
		} else {
			// A limit on the next steps fails the step as a rejection does; the store not
			// answering leaves the decision to come up again.
			err = h.reserve(ctx, rec, routes)
		}
		if err == nil {
			// The staged volume changes become current before any next step is released, so
			// that it reads them; a head that moved meanwhile fails the step (terminal).
			err = h.promoteStaged(ctx, held, a.Staged)
		}
		switch {
		case jobtype.IsTerminal(err):
			cause = err
		case err != nil:
			return nil, time.Time{}, err
		default:
			subjects, err := h.publishRoutes(ctx, rec, withApproval(routes, &a), nil)
			if err != nil {
				return nil, time.Time{}, err
			}
			final.Status, final.Outputs = jobtype.Succeeded, append(rec.Outputs, subjects...)
		}
	}
	if cause != nil {
		dl := jobs.DeadLetter{JobID: rec.ID, Function: fn.Name, Subject: rec.Subject, Error: cause.Error(), Attempts: rec.Attempts, Data: rec.Args, Header: nats.Header{}}
		if _, err := h.js.PublishMsg(ctx, dl.Msg(rec.FlowID, h.ids.Derive(rec.ID, "dead"), int(h.nc.MaxPayload()))); err != nil {
			return nil, time.Time{}, fmt.Errorf("keep the dead letter: %w", err)
		}
		ev := h.outMsg(bus.ErrorSubject(fn.Name), errorBody(rec, cause.Error(), ""), rec)
		ev.Header.Set(bus.HeaderMsgID, h.ids.Derive(rec.ID, "error"))
		h.vouchStep(ev, rec)
		if err := h.publish(ctx, ev); err != nil {
			return nil, time.Time{}, fmt.Errorf("publish the error event: %w", err)
		}
		final.Status, final.Error, final.Outputs = jobtype.Failed, boundedError(cause.Error()), append(rec.Outputs, ev.Subject)
	}
	if err := h.move(step, &final); err != nil {
		return nil, time.Time{}, fmt.Errorf("record the decision: %w", err)
	}
	if decision != decideTimeout && a.Timer != 0 {
		h.disarm(ctx, fn.Name, a.Timer)
	}
	if final.Status != jobtype.Succeeded && len(a.Staged) > 0 {
		// After the move, never before: a decision that lost to another must not discard
		// what that one promoted. A promoted volume's version is a kept one and stays.
		h.discardStaged(ctx, rec.ID, a.Staged, "the step ended "+string(final.Status)+" on its decision ("+decision+")", held.Discard)
	}
	h.log.Info("approval decided", zap.String("function", fn.Name), zap.String("job_id", rec.ID), zap.String("decision", decision),
		zap.String("by", a.By), zap.String("status", string(final.Status)))
	return &final, time.Time{}, nil
}

// withApproval puts the decision into what each next step gets: into an object result, or
// beside any other as {"result": …, "approval": …}.
func withApproval(routes []route.Message, a *jobs.Approval) []route.Message {
	note, _ := json.Marshal(map[string]any{"by": a.By, "comment": a.Comment, "at": a.At})
	for i, r := range routes {
		var obj map[string]json.RawMessage
		if json.Unmarshal(r.Data, &obj) != nil || obj == nil {
			obj = map[string]json.RawMessage{"result": r.Data}
		}
		obj["approval"] = note
		routes[i].Data, _ = json.Marshal(obj)
	}
	return routes
}

// replyMsg is the delivery as a request to answer: its signed Reply-To, or nothing.
func (j *job) replyMsg() *nats.Msg {
	return &nats.Msg{Reply: j.replyTo}
}

// Who may decide. A decision is a trigger of the step's function with Approval-* headers; the
// trigger stream takes agent.run.* from any caller, so the headers prove nothing by themselves.
// A host acts on a decision only with the hosts' proof: the approval's own timer (its message
// id, derived with the hosts' key) or a signature a host made (ids.DecisionSig) when one of the
// hosts' faces asked it to on bus.ApprovalsDecideSubject, which only the hosts user may
// publish to. Every other Approval-* header is dropped, logged, and the message runs as the
// plain trigger it then is: whoever sent it may run the function anyway, but decides nothing.

// decisionOf reports the job a delivery decides, when a host made that decision; it drops the
// Approval-* headers of any other delivery.
func (h *Host) decisionOf(j *job) (string, bool) {
	hdr := j.msg.Headers()
	var names []string
	for k := range hdr {
		if len(k) >= len(bus.ApprovalHeaderPrefix) && strings.EqualFold(k[:len(bus.ApprovalHeaderPrefix)], bus.ApprovalHeaderPrefix) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	of, decision, msgID := hdr.Get(bus.HeaderApprovalOf), hdr.Get(bus.HeaderApprovalDecision), hdr.Get(bus.HeaderMsgID)
	switch {
	case of == "" && len(names) == 1 && names[0] == bus.HeaderApprovalSig:
		return "", false // a decided step's note to its next step: checkApprovalNote reads it
	case of != "" && decision == decideTimeout && msgID == h.ids.Derive("approval-timeout", of):
		return of, true
	case of != "" && ids.Verify(hdr.Get(bus.HeaderApprovalSig),
		h.ids.DecisionSig(j.s.fn.Name, of, decision, hdr.Get(bus.HeaderApprovalBy), hdr.Get(bus.HeaderApprovalComment), msgID)):
		return of, true
	}
	h.log.Warn("dropped Approval-* headers that no host made; the message runs as a plain trigger and decides nothing "+
		"(decide with `host approve`, the dashboard or a signed link)",
		zap.String("function", j.s.fn.Name), zap.String("job_id", j.rec.ID), zap.Strings("headers", names),
		zap.String("approval_of", abbreviate(of, 100)), zap.String("claimed_by", abbreviate(hdr.Get(bus.HeaderApprovalBy), 100)))
	for _, k := range names {
		delete(hdr, k)
	}
	return "", false
}

// checkApprovalNote refuses a trigger of a step that follows an approval gate when it carries
// an "approval" argument that no gate's decision made: the step would take the caller's word
// for who approved. A gate's next steps get the note signed (publishRoutes).
func (h *Host) checkApprovalNote(j *job) error {
	gates := h.gatesBefore(j.s.fn.Name)
	if len(gates) == 0 {
		return nil
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(j.msg.Data(), &args) != nil {
		return nil // not an object: no "approval" key (the payload check says the rest)
	}
	if _, ok := args["approval"]; !ok {
		return nil
	}
	hdr := j.msg.Headers()
	if ids.Verify(hdr.Get(bus.HeaderApprovalSig), h.ids.ApprovalNoteSig(hdr.Get(bus.HeaderParentJob), j.msg.Data())) {
		return nil
	}
	h.log.Warn("refused a trigger whose \"approval\" argument no decision made", zap.String("function", j.s.fn.Name),
		zap.String("job_id", j.rec.ID), zap.Strings("gates", gates), zap.String("subject", j.msg.Subject()))
	return fmt.Errorf("the message carries an \"approval\" argument, but %s follows the approval gate of %s and takes its approval only from that step's decision; "+
		"send the message without \"approval\", or decide the gate's step with `host approve`", j.s.fn.Name, strings.Join(gates, ", "))
}

// gatesBefore names the functions with approve: whose next: edges reach name.
func (h *Host) gatesBefore(name string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gates[name]
}

// approvalGates maps each function to the approval gates whose next: edges reach it.
func approvalGates(fns map[string]*functions.Function) map[string][]string {
	gates := map[string][]string{}
	for _, gate := range fns {
		if gate.Spec.Approve == nil {
			continue
		}
		for _, next := range gate.Routes.Subjects() {
			for _, g := range fns {
				if slices.ContainsFunc(g.Subjects(), func(s string) bool { return bus.SubjectMatches(s, next) }) && !slices.Contains(gates[g.Name], gate.Name) {
					gates[g.Name] = append(gates[g.Name], gate.Name)
				}
			}
		}
	}
	for _, gs := range gates {
		slices.Sort(gs)
	}
	return gates
}
