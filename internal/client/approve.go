package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// decideWait bounds how long a decision waits for the host that settles it: it publishes the
// step's next steps first.
const decideWait = 2 * time.Minute

// Decide approves (or, with approve false, rejects) job id, which waits for a decision, on
// behalf of by, and returns its record as the decision left it. It is an agent.call of the
// job's function, so whichever host serves it settles it; a job that is not waiting (decided
// already, timed out, canceled, or never an approval) is an error saying so, and nothing
// changes.
func (c *Client) Decide(ctx context.Context, id string, approve bool, by, comment string) (*jobs.Record, error) {
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	rec, err := c.Jobs.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	// Running: the step's announcement may come a moment before its record says waiting; the
	// host that takes the decision holds it until it does (or refuses it once the job ends).
	if rec.Status != jobtype.Waiting && rec.Status != jobtype.Running {
		return nil, fmt.Errorf("job %s is %s: %w; there is nothing to decide", id, rec.Status, ErrNotWaiting)
	}
	decision := "approve"
	if !approve {
		decision = "reject"
	}
	want := jobs.Approved
	if !approve {
		want = jobs.Rejected
	}
	// A trigger of the job's function, durable like any: whichever host serves it settles the
	// decision, and the record says what became of it.
	m := nats.NewMsg(bus.RunSubject(rec.Function))
	m.Data = []byte("{}")
	m.Header.Set(bus.HeaderMsgID, ids.New())
	m.Header.Set(bus.HeaderApprovalOf, id)
	m.Header.Set(bus.HeaderApprovalDecision, decision)
	m.Header.Set(bus.HeaderApprovalBy, by)
	m.Header.Set(bus.HeaderApprovalComment, comment)
	ctx, cancel := context.WithTimeout(ctx, decideWait)
	defer cancel()
	if _, err := c.JS.PublishMsg(ctx, m); err != nil {
		return nil, fmt.Errorf("decide job %s: %w", id, err)
	}
	done, err := c.Jobs.WaitFinal(ctx, id)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("decide job %s: no host settled the decision within %s; is a host serving %s running? (`host functions`)", id, decideWait, rec.Function)
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
