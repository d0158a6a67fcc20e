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
	if rec.Status != jobtype.Waiting {
		return nil, fmt.Errorf("job %s is %s, not waiting for a decision: there is nothing to decide", id, rec.Status)
	}
	decision := "approve"
	if !approve {
		decision = "reject"
	}
	m := nats.NewMsg(bus.CallSubject(rec.Function))
	m.Data = []byte("{}")
	m.Header.Set(bus.HeaderApprovalOf, id)
	m.Header.Set(bus.HeaderApprovalDecision, decision)
	m.Header.Set(bus.HeaderApprovalBy, by)
	m.Header.Set(bus.HeaderApprovalComment, comment)
	ctx, cancel := context.WithTimeout(ctx, decideWait)
	defer cancel()
	reply, err := c.NC.RequestMsgWithContext(ctx, m)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("decide job %s: no host serves %s now; start one and decide again", id, rec.Function)
		}
		return nil, fmt.Errorf("decide job %s: %w", id, err)
	}
	if reply.Header.Get(bus.HeaderJobStatus) != "decided" {
		var ev jobs.ErrorEvent
		_ = json.Unmarshal(reply.Data, &ev)
		return nil, fmt.Errorf("decide job %s: %s", id, ev.Error)
	}
	var done jobs.Record
	if err := json.Unmarshal(reply.Data, &done); err != nil {
		return nil, fmt.Errorf("decide job %s: the host's answer: %w", id, err)
	}
	return &done, nil
}

// Approvals lists the steps that wait for a decision, newest first.
func (c *Client) Approvals(ctx context.Context) ([]*jobs.Record, error) {
	return c.Jobs.Recent(ctx, jobs.Filter{Status: jobtype.Waiting}, 0)
}
