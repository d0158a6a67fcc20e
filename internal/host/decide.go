package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
)

// Who may decide a waiting step, checked by the host that a face asks (queueDecision) before it
// signs the decision, against the step's record:
//
//   - the decider's role is approver or above (people.Decide);
//   - when the gate names groups (approve: ... by ops,security), a user is in one of them. The
//     operator (the web token, the hosts' NATS credentials: people.Operator, no person) is not
//     held to them: it is the single administrator, who could add itself to any group anyway.
//     Nor is a signed link: it is a capability the hosts sent to whoever they announce
//     approvals to, and it says so in approval.by;
//   - the decider is not the person who started the flow (the record's starter, which a host
//     records only when it can vouch for it; see started.go);
//   - the step still waits: one decided already says by whom and when.
//
// Faces ask on bus.ApprovalsDecideSubject with the principal they authenticated (only the hosts
// user may publish there); a user's own NATS login asks on bus.UserDecideSubject(<name>), the
// one subject of agent.admin.> its permissions grant it, and there the principal is that user
// as the store holds it, whatever the body says.

// Errors a decision is refused with (DecideReply.Refused), each in the reply's chain of words.
var (
	errNotApprover  = errors.New("not an approver")
	errNotInGroups  = errors.New("not in the group(s) of this approval")
	errOwnFlow      = errors.New("you started this flow; someone else must decide its steps")
	errMayOwnFlow   = errors.New("you may have started this flow; someone else must decide its steps")
	errUnknownUser  = errors.New("no such user")
	errStillRunning = errors.New("the step is still running")
)

// subscribeDecisions answers the hosts' faces on bus.ApprovalsDecideSubject and users' own
// NATS logins on bus.UserDecideSubject(<name>), one host each.
func (h *Host) subscribeDecisions() ([]*nats.Subscription, error) {
	return bus.AdminSubscribe(h.nc, func(m *nats.Msg) {
		go h.answerDecide(m) // it waits for JetStream; other requests do not wait behind it
	}, bus.ApprovalsDecideSubject, bus.UserDecidePrefix+"*")
}

func (h *Host) answerDecide(m *nats.Msg) {
	var rep jobs.DecideReply
	if user, ok := strings.CutPrefix(m.Subject, bus.UserDecidePrefix); ok {
		rep = h.decideAsUser(user, m.Data)
	} else {
		rep = h.decideForFace(m.Data)
	}
	rep.Host = h.cfg.HostID
	b, _ := json.Marshal(rep)
	if err := m.Respond(b); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		h.log.Warn("cannot answer a decision request; its sender times out", zap.Error(err))
	}
}

// decision is a request to decide, with whom it is decided by and through which face.
type decision struct {
	req  jobs.DecideRequest
	who  people.Principal
	face string // web, cli, link, nats: the audit entry's
}

// decideForFace reads a face's request: the principal is the one the face authenticated, or,
// from a face that names none, the operator By names.
func (h *Host) decideForFace(data []byte) jobs.DecideReply {
	var req jobs.DecideRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return jobs.DecideReply{Error: fmt.Sprintf("the request is not a decision (%v): send {\"job\", \"decision\", \"who\"}", err)}
	}
	who := people.Operator(req.By, "nats")
	if req.Who != nil {
		who = *req.Who
	}
	if strings.TrimSpace(who.Name) == "" {
		return jobs.DecideReply{Error: "the decision names nobody: who is whoever the face that sends it authenticated"}
	}
	return h.queueDecision(decision{req: req, who: who, face: faceOf(who)})
}

// faceOf names the face a principal came through, from how it was authenticated.
func faceOf(p people.Principal) string {
	switch p.Via {
	case "link", "cli":
		return p.Via
	case "nats", "nats login":
		return "nats"
	}
	return "web"
}

// decideAsUser reads a request on user's own subject: the principal is the user as the store
// holds it now (its role and groups), never what the body says.
func (h *Host) decideAsUser(user string, data []byte) jobs.DecideReply {
	var req jobs.DecideRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return jobs.DecideReply{Error: fmt.Sprintf("the request is not a decision (%v): send {\"job\", \"decision\"}", err)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.AckWait)
	defer cancel()
	d := decision{req: req, who: people.Principal{Name: user, User: true, Via: "nats login"}, face: "nats"}
	us, err := h.users(ctx)
	if err != nil {
		return jobs.DecideReply{Error: fmt.Sprintf("read the users: %v; try again", err)}
	}
	u, ok := us.ByName[user]
	if !ok {
		return h.refuse(d, "", fmt.Errorf("%w %q: the subject %s names a user the store does not hold (`host users ls`)", errUnknownUser, abbreviate(user, 80), bus.UserDecideSubject(abbreviate(user, 80))))
	}
	d.who = u.Principal("nats login")
	return h.queueDecision(d)
}

// users reads the users as the store holds them.
func (h *Host) users(ctx context.Context) (people.Users, error) {
	if h.people == nil {
		return people.Users{ByName: map[string]people.User{}}, nil
	}
	return h.people.Load(ctx)
}

// queueDecision checks d (see the top of this file), signs it and queues it on the job's
// function, where whichever host takes it settles it (decideApproval). Every decision asked
// for, queued or refused, goes to the audit stream.
func (h *Host) queueDecision(d decision) jobs.DecideReply {
	req := d.req
	switch {
	case !ids.Safe.MatchString(req.Job):
		return h.refuse(d, "", fmt.Errorf("job id %q is not one this host makes ([A-Za-z0-9_-], at most 64)", abbreviate(req.Job, 80)))
	case req.Decision != decideApprove && req.Decision != decideReject:
		return h.refuse(d, "", fmt.Errorf("decision %q: it is approve or reject", abbreviate(req.Decision, 40)))
	}
	if err := d.who.May(people.Decide, ""); err != nil {
		return h.refuse(d, "", fmt.Errorf("%s is %w: the role %s may not decide approvals (it takes %s or above)", d.who.Name, errNotApprover, d.who.Role, people.Decide.Needs()))
	}
	by, comment := abbreviate(d.who.Name, 200), abbreviate(req.Comment, 2000)
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.AckWait)
	defer cancel()
	rec, err := h.decidable(ctx, req.Job)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return h.refuse(d, "", fmt.Errorf("job %s: %w; there is nothing to decide: %w", req.Job, err, errNotWaiting))
	case err != nil:
		return h.refuse(d, "", fmt.Errorf("read job %s: %w; try again", req.Job, err))
	}
	if err := notWaiting(rec); err != nil {
		return h.refuse(d, rec.Function, err)
	}
	if err := checkDecider(d.who, rec); err != nil {
		return h.refuse(d, rec.Function, err)
	}
	if err := h.checkUnvouchedStart(ctx, d.who, rec); err != nil {
		return h.refuse(d, rec.Function, err)
	}
	m := nats.NewMsg(bus.RunSubject(rec.Function))
	m.Data = []byte("{}")
	msgID := ids.New()
	m.Header.Set(bus.HeaderMsgID, msgID)
	m.Header.Set(bus.HeaderApprovalOf, req.Job)
	setDeployment(m.Header, rec)
	m.Header.Set(bus.HeaderApprovalDecision, req.Decision)
	m.Header.Set(bus.HeaderApprovalBy, by)
	m.Header.Set(bus.HeaderApprovalComment, comment)
	m.Header.Set(bus.HeaderApprovalSig, h.ids.DecisionSig(rec.Function, req.Job, req.Decision, by, comment, msgID))
	h.signDeployment(m)
	if _, err := h.js.PublishMsg(ctx, m); err != nil {
		return h.refuse(d, rec.Function, fmt.Errorf("queue the decision on %s: %w; try again", m.Subject, err))
	}
	h.log.Info("approval decision queued", zap.String("function", rec.Function), zap.String("job_id", req.Job),
		zap.String("decision", req.Decision), zap.String("by", by), zap.String("face", d.face))
	h.audit(audit.Entry{Who: by, Face: d.face, Act: "approval." + req.Decision, Target: req.Job, Detail: decisionDetail(rec.Function, comment)})
	rep := jobs.DecideReply{Function: rec.Function}
	if req.Wait {
		rep.Record, rep.Error, rep.NotWaiting = h.settled(req.Job, req.Decision, by)
	}
	return rep
}

// decidable reads job id's record, waiting while it says running: a step's announcement goes
// out a moment before its record says waiting, and the checks need the waiting record (its
// starter, its gate's groups).
func (h *Host) decidable(ctx context.Context, id string) (*jobs.Record, error) {
	for {
		rec, err := h.jobs.Get(ctx, id)
		if err != nil || rec.Status != jobtype.Running {
			return rec, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("job %s: %w; decide once it waits (`host approvals` lists it)", id, errStillRunning)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// notWaiting says why rec's step waits for no decision: decided already (by whom, when), or
// in another state; nil when it waits.
func notWaiting(rec *jobs.Record) error {
	if rec.Status == jobtype.Waiting && rec.Approval != nil {
		return nil
	}
	if a := rec.Approval; a != nil && a.Decision != "" {
		return fmt.Errorf("job %s was already %s by %s at %s: %w", rec.ID, a.Decision, a.By, a.At.UTC().Format(time.RFC3339), errNotWaiting)
	}
	return fmt.Errorf("job %s is %s: %w", rec.ID, rec.Status, errNotWaiting)
}

// checkDecider refuses a decider the gate's groups leave out, and the flow's own starter.
func checkDecider(who people.Principal, rec *jobs.Record) error {
	if groups := rec.Approval.Groups; who.User && !who.InAnyGroup(groups) {
		in := "in no group"
		if len(who.Groups) > 0 {
			in = "in " + strings.Join(who.Groups, ", ")
		}
		return fmt.Errorf("%s is %s, %w %s of this approval (approve: by %s); ask one of its members",
			who.Name, in, errNotInGroupsPrefix, strings.Join(groups, ", "), strings.Join(groups, ","))
	}
	if who.User && rec.Starter != "" && who.Name == rec.Starter {
		return fmt.Errorf("%w (%s started flow %s)", errOwnFlow, who.Name, rec.FlowID)
	}
	return nil
}

// checkUnvouchedStart closes the gap the self-approval rule has with users' own NATS logins.
// A JetStream message does not say which NATS user published it, so a flow whose first
// trigger came straight from a NATS client has no starter a host can vouch for (started.go):
// its starter could be any user whose NATS login may publish that trigger. Such a user may not
// decide the flow's steps; the operator, a signed link, and users without such a login may.
// Refusing everyone a claim names instead would be defeated by leaving the claim out.
func (h *Host) checkUnvouchedStart(ctx context.Context, who people.Principal, rec *jobs.Record) error {
	if !who.User || rec.Starter != "" {
		return nil
	}
	root := rec
	if rec.FlowID != "" && rec.FlowID != rec.ID {
		r, err := h.jobs.Get(ctx, rec.FlowID)
		if err != nil {
			return nil // no record of the flow's start is left: nothing says a NATS client made it
		}
		root = r
	}
	if !strings.HasPrefix(root.StartedBy, startedByClient) {
		return nil
	}
	us, err := h.users(ctx)
	if err != nil {
		return fmt.Errorf("read the users to check who may have started flow %s: %w; try again", rec.FlowID, err)
	}
	u, ok := us.ByName[who.Name]
	if !ok || !u.NATS || u.Role < people.Runner || !u.Principal("").RunsFunction(root.Function) {
		return nil
	}
	return fmt.Errorf("%w: flow %s was started by %s, which no host can vouch for, and the NATS login of %s may publish its first step (%s), "+
		"so %s may have started it; a user without such a login, or the operator, decides it", errMayOwnFlow, rec.FlowID, root.StartedBy, who.Name, root.Function, who.Name)
}

// errNotInGroupsPrefix words errNotInGroups with the groups named in between.
var errNotInGroupsPrefix = wrapWords{errNotInGroups, "not in the group(s)"}

// wrapWords is err as %w, printed as words of its own.
type wrapWords struct {
	err   error
	words string
}

func (w wrapWords) Error() string { return w.words }
func (w wrapWords) Unwrap() error { return w.err }

// refuse answers a decision that was not queued, and records that it was asked for.
func (h *Host) refuse(d decision, function string, err error) jobs.DecideReply {
	by := abbreviate(d.who.Name, 200)
	if by == "" {
		by = "someone"
	}
	rep := jobs.DecideReply{Function: function, Error: err.Error(), NotWaiting: errors.Is(err, errNotWaiting),
		Refused: errors.Is(err, errNotApprover) || errors.Is(err, errNotInGroups) || errors.Is(err, errOwnFlow) || errors.Is(err, errMayOwnFlow) || errors.Is(err, errUnknownUser)}
	h.log.Warn("approval decision refused", zap.String("job_id", abbreviate(d.req.Job, 80)), zap.String("by", by), zap.String("face", d.face), zap.Error(err))
	act := "approval." + d.req.Decision
	if d.req.Decision != decideApprove && d.req.Decision != decideReject {
		act = "approval.decide"
	}
	h.audit(audit.Entry{Who: by, Face: d.face, Act: act, Target: abbreviate(d.req.Job, 80), Detail: decisionDetail(function, abbreviate(d.req.Comment, 2000)), Error: err.Error()})
	return rep
}

func decisionDetail(function, comment string) string {
	var parts []string
	if function != "" {
		parts = append(parts, "function "+function)
	}
	if comment != "" {
		parts = append(parts, "comment: "+abbreviate(comment, 200))
	}
	return strings.Join(parts, "; ")
}

// settled waits for the decision by by on job id to be settled and returns the record it
// left, or why the decision did not stand (decided otherwise meanwhile, timed out, canceled).
func (h *Host) settled(id, decision, by string) (rec *jobs.Record, why string, lost bool) {
	ctx, cancel := context.WithTimeout(context.Background(), decideWait)
	defer cancel()
	rec, err := h.jobs.WaitFinal(ctx, id)
	if err != nil {
		return nil, fmt.Sprintf("the decision is queued, but no host settled it within %s: is a host serving its function running? (`host functions`)", decideWait), false
	}
	want := jobs.Approved
	if decision == decideReject {
		want = jobs.Rejected
	}
	if a := rec.Approval; a == nil || a.Decision != want || a.By != by {
		return rec, fmt.Sprintf("job %s ended %s before this decision: %v", id, rec.Status, notWaiting(rec)), true
	}
	return rec, "", false
}

// decideWait bounds how long a request that asks to Wait waits for its decision's settlement:
// the host that settles it publishes the step's next steps first.
const decideWait = 2 * time.Minute

// audit appends e to the audit stream, naming this host; an entry that cannot be written is
// said in the log: the act happened, its record is what is missing.
func (h *Host) audit(e audit.Entry) {
	e.Host = h.cfg.HostID
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := audit.Append(ctx, h.js, e); err != nil {
		h.log.Warn("the act happened, but its audit entry could not be written", zap.String("act", e.Act), zap.String("who", e.Who),
			zap.String("target", e.Target), zap.Error(err))
	}
}
