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
	ctx, cancel := context.WithTimeout(ctx, decideWait)
	defer cancel()
	// A host signs the decision with the hosts' key and queues it on the job's function, so
	// whichever host serves it settles it; a decision nobody signed would be dropped. Only the
	// hosts user may publish on agent.admin.>.
	body, _ := json.Marshal(jobs.DecideRequest{Job: id, Decision: decision, By: by, Comment: comment, Who: &who})
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
	if rep.Error != "" {
		if rep.NotWaiting {
			return nil, fmt.Errorf("decide job %s: host %s: %s: %w", id, rep.Host, rep.Error, ErrNotWaiting)
		}
		return nil, fmt.Errorf("decide job %s: host %s refused: %s", id, rep.Host, rep.Error)
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
