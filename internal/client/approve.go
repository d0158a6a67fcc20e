package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
)

// decideWait bounds how long a decision waits for the host that settles it: it publishes the
// step's next steps first.
const decideWait = 2 * time.Minute

// Decide approves (or, with approve false, rejects) job id, which waits for a decision, on
// behalf of who, and returns its record as the decision left it. who is whoever the calling
// face authenticated (its Name is the record's approval.by); the client must be connected as
// the hosts user. A host signs the decision and
// queues it on the job's function, so whichever host serves it settles it; a job that is not
// waiting (decided already, timed out, canceled, or never an approval) is an error saying so,
// and nothing changes.
func (c *Client) Decide(ctx context.Context, id string, approve bool, who people.Principal, comment string) (*jobs.Record, error) {
	by := who.Name
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	// The host checks everything (the job waits, who decides may) and records the decision
	// asked for, refused or not, in the audit stream: nothing is refused here first.
	decision := "approve"
	if !approve {
		decision = "reject"
	}
	want := jobs.Approved
	if !approve {
		want = jobs.Rejected
	}
	ctx, cancel := context.WithTimeout(ctx, decideWait)
	defer cancel()
	// A host signs the decision with the hosts' key and queues it on the job's function, so
	// whichever host serves it settles it; a decision nobody signed would be dropped. Only the
	// hosts user may publish on agent.admin.>.
	body, err := json.Marshal(jobs.DecideRequest{Job: id, Decision: decision, By: by, Comment: comment, Who: &who})
	if err != nil {
		return nil, fmt.Errorf("decide job %s: the principal %q cannot be sent: %w", id, who.Name, err)
	}
	m, err := c.NC.RequestWithContext(ctx, bus.ApprovalsDecideSubject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("decide job %s: no host answers %s: is a host running on this NATS, and is this client connected as the hosts user? %w",
				id, bus.ApprovalsDecideSubject, err)
		}
		return nil, fmt.Errorf("decide job %s: ask a host on %s: %w", id, bus.ApprovalsDecideSubject, err)
	}
	var rep jobs.DecideReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return nil, fmt.Errorf("decide job %s: the answer on %s is not a host's: %w", id, bus.ApprovalsDecideSubject, err)
	}
	if err := replyError(id, &rep); err != nil {
		return nil, err
	}
	done, err := c.Jobs.WaitFinal(ctx, id)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("decide job %s: no host settled the decision within %s; is a host serving %s running? (`host functions`)", id, decideWait, rep.Function)
	}
	if err != nil {
		return nil, fmt.Errorf("decide job %s: %w", id, err)
	}
	if a := done.Approval; a == nil || a.Decision != want || a.By != by {
		// Decided by someone else meanwhile, timed out, or canceled.
		return nil, fmt.Errorf("job %s ended %s before this decision (%s): %w", id, done.Status, ended(done), ErrNotWaiting)
	}
	return done, nil
}

// replyError is the error a host's answer to a decision says, nil when it queued it.
func replyError(id string, rep *jobs.DecideReply) error {
	switch {
	case rep.Error == "":
		return nil
	case rep.NotWaiting:
		return fmt.Errorf("decide job %s: host %s: %s: %w", id, rep.Host, rep.Error, ErrNotWaiting)
	case rep.Refused:
		return fmt.Errorf("decide job %s: host %s refused: %s: %w", id, rep.Host, rep.Error, ErrRefused)
	}
	return fmt.Errorf("decide job %s: host %s refused: %s", id, rep.Host, rep.Error)
}

// DecideAsUser approves (or rejects) job id as user, on the user's own NATS login: the request
// goes to bus.UserDecideSubject(user), the one admin subject such a login may publish to, and
// the host takes the user's role and groups from the store, not from here. It needs no access
// to JetStream: the host answers once the decision is settled, with the record it left.
func DecideAsUser(ctx context.Context, nc *nats.Conn, user, id string, approve bool, comment string) (*jobs.Record, error) {
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	decision := "approve"
	if !approve {
		decision = "reject"
	}
	ctx, cancel := context.WithTimeout(ctx, decideWait+10*time.Second)
	defer cancel()
	subject := bus.UserDecideSubject(user)
	body, _ := json.Marshal(jobs.DecideRequest{Job: id, Decision: decision, By: user, Comment: comment, Wait: true})
	m, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("decide job %s: no host answered on %s: is a host running, and may NATS user %s publish there (`host users add %s --nats` with the role approver)? %w",
				id, subject, user, user, err)
		}
		return nil, fmt.Errorf("decide job %s: ask a host on %s: %w", id, subject, err)
	}
	var rep jobs.DecideReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return nil, fmt.Errorf("decide job %s: the answer on %s is not a host's: %w", id, subject, err)
	}
	if err := replyError(id, &rep); err != nil {
		return nil, err
	}
	if rep.Record == nil {
		return nil, fmt.Errorf("decide job %s: host %s queued the decision but did not say how it was settled; see `host job %s`", id, rep.Host, id)
	}
	return rep.Record, nil
}

func ended(rec *jobs.Record) string {
	if a := rec.Approval; a != nil && a.Decision != "" {
		return a.Decision + " by " + a.By
	}
	return rec.Error
}

// Approvals lists the steps that wait for a decision, newest first.
func (c *Client) Approvals(ctx context.Context) ([]*jobs.Record, error) {
	return c.Jobs.Recent(ctx, jobs.Filter{Status: jobtype.Waiting}, 0)
}

// ErrNotWaiting is in the error of a decision on a job that does not wait for one.
var ErrNotWaiting = errors.New("the job is not waiting for a decision")

// ErrRefused is in the error of a decision the decider may not make: its role, the gate's
// groups, or its own flow; the error says which.
var ErrRefused = errors.New("the decider may not decide this step")
