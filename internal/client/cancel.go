package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// ErrUnknownJob is returned for a job id that has no record (never queued, mistyped, or past
// the records' retention). It is jobs.ErrNotFound, so either name matches.
var ErrUnknownJob = jobs.ErrNotFound

// ErrFinished is returned when the job to cancel has already ended; a FinishedError says how.
var ErrFinished = errors.New("the job has already finished")

// FinishedError is a cancel that came too late: the job had ended, as Record says. It matches
// ErrFinished.
type FinishedError struct{ Record *jobs.Record }

func (e *FinishedError) Error() string {
	r := e.Record
	return fmt.Sprintf("job %s has already finished (%s at %s); there is nothing to cancel", r.ID, r.Status, r.Finished.Local().Format(time.DateTime))
}

func (e *FinishedError) Is(target error) bool { return target == ErrFinished }

// Canceled is what a cancel did: the job's final record, and what the job was doing.
type Canceled struct {
	*jobs.Record
	// Was is queued or retrying (a waiting job: it will not run) or running.
	Was jobtype.Status `json:"was"`
	// StoppedBy is the host that stopped the running job; "" when no host answered for it
	// (its host had died) and only its record was canceled.
	StoppedBy string `json:"stopped_by,omitempty"`
}

// cancelAnswerWait is how long a cancel waits for the host running a job to say it stopped it;
// past it, no host is running the job (its host died), and the record alone is canceled.
const cancelAnswerWait = 5 * time.Second

// cancelTries bounds how often Cancel reads the record again after a host moved the job under
// it (it started, or ended).
const cancelTries = 5

// Cancel stops a job and returns its final, canceled record and what it was doing. A queued job (or one waiting for
// its retry) is canceled in its record, and the host that takes its trigger drops it; a running
// one is stopped by the host running it, which kills its jail and every process in it, and
// records it canceled: not retried, no volume written back. Cancel of an unknown job returns an
// error matching ErrUnknownJob; of a finished one, a *FinishedError (ErrFinished).
func (c *Client) Cancel(ctx context.Context, id string) (*Canceled, error) {
	return c.CancelAs(ctx, id, CanceledBy())
}

// CancelAs is Cancel on behalf of by, whom the job's record names as who canceled it (Cancel
// names the user and machine it runs as; the dashboard, the browser's address).
func (c *Client) CancelAs(ctx context.Context, id, by string) (*Canceled, error) {
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	for range cancelTries {
		rec, at, err := c.Jobs.GetRev(ctx, id)
		if errors.Is(err, jobs.ErrNotFound) {
			return nil, fmt.Errorf("%w (list jobs with `host jobs`; records are kept 7 days)", err)
		}
		if err != nil {
			return nil, err
		}
		if rec.Status.Final() {
			return nil, &FinishedError{Record: rec}
		}
		was := rec.Status
		if was == jobtype.Running {
			if stopped, err := c.stopRunning(ctx, id, by); err != nil || stopped != nil {
				return stopped, err
			}
		}
		// Waiting, or running on no host that answers (its host died, and JetStream will hand
		// its trigger to another): the record says canceled, and whoever takes the trigger next
		// drops it. A host that was only slow to answer finds the record canceled when it ends
		// the job, and the store refuses its late verdict.
		why := fmt.Sprintf("canceled by %s before it ran", by)
		if was == jobtype.Running {
			why = fmt.Sprintf("canceled by %s while no host was running it (host %s stopped before it finished)", by, rec.Host)
		}
		rec.Status, rec.Error, rec.Finished = jobtype.Canceled, why, time.Now()
		_, err = c.Jobs.Move(ctx, rec, at)
		var moved *jobs.MoveError
		switch {
		case err == nil:
			return &Canceled{Record: rec, Was: was}, nil
		case errors.As(err, &moved) && moved.Stored != nil && moved.Stored.Status.Final():
			return nil, &FinishedError{Record: moved.Stored} // it ended meanwhile
		case !errors.Is(err, jobs.ErrConflict):
			return nil, fmt.Errorf("cancel job %s: %w", id, err)
		}
	}
	return nil, fmt.Errorf("cancel job %s: its record kept changing under the cancel; try again", id)
}

// stopRunning asks the host running a job to stop it and waits for its final record. It returns
// nil and no error when no host answers.
func (c *Client) stopRunning(ctx context.Context, id, by string) (*Canceled, error) {
	m := nats.NewMsg(bus.CancelSubject(id))
	m.Header.Set(jobs.HeaderCanceledBy, by)
	actx, cancel := context.WithTimeout(ctx, cancelAnswerWait)
	defer cancel()
	reply, err := c.NC.RequestMsgWithContext(actx, m)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("cancel job %s: %w", id, ctx.Err())
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ask the hosts to cancel job %s on %s: %w", id, m.Subject, err)
	}
	var answer jobs.CancelReply
	if err := json.Unmarshal(reply.Data, &answer); err != nil {
		return nil, fmt.Errorf("cancel job %s: the host's answer %q: %w", id, reply.Data, err)
	}
	rec, err := c.Jobs.WaitFinal(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("host %s is stopping job %s, but its final record did not come: %w", answer.Host, id, err)
	}
	if rec.Status != jobtype.Canceled {
		return nil, &FinishedError{Record: rec} // it ended on its own as the cancel arrived
	}
	return &Canceled{Record: rec, Was: jobtype.Running, StoppedBy: answer.Host}, nil
}

// CanceledBy names who cancels from this process, for the record: the user and machine.
func CanceledBy() string {
	name := "someone"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return name
}

// queue writes the queued record of a job about to be published, so that `host job <id>` and
// `host cancel <id>` find it at once, and returns its version (created reports whether it was
// written). A record the job already has is left as it is, but only when it is a record of the
// same call: the same function, and the same arguments (a caller's id is an idempotency key,
// bound to what it first came with).
func (c *Client) queue(ctx context.Context, function, id string, payload []byte) (v jobs.Version, created bool, err error) {
	rec := &jobs.Record{ID: id, Function: function, FlowID: id, Subject: bus.RunSubject(function), Status: jobtype.Queued, Enqueued: time.Now()}
	rec.KeepArgs(payload)
	v, err = c.Jobs.Move(ctx, rec, jobs.Version{})
	if err == nil {
		return v, true, nil
	}
	if !errors.Is(err, jobs.ErrConflict) {
		return v, false, fmt.Errorf("queue job for %s: %w", function, err)
	}
	var moved *jobs.MoveError
	if !errors.As(err, &moved) {
		return v, false, fmt.Errorf("queue job %s for %s: read the record its id already has: %w", id, function, err)
	}
	switch prev := moved.Stored; {
	case prev == nil:
		return v, false, nil // deleted since: the stream decides, as for a new id
	case prev.Function != function:
		return v, false, jobs.TakenID(id, function, prev.Function)
	case !prev.SameArgs(payload):
		return v, false, jobs.ReusedID(id, function)
	}
	return v, false, nil
}

// FlowCanceled is what canceling a flow did: the jobs it canceled, and those it could not.
type FlowCanceled struct {
	Flow     string      `json:"flow_id"`
	Canceled []*Canceled `json:"canceled"`
	// Failed are the jobs that could not be canceled, with why; they are still canceled when
	// they come to run, as every job of the flow is.
	Failed map[string]string `json:"failed,omitempty"`
}

// flowCancels bounds how many of a flow's jobs are canceled at once: each running one waits
// for its host's answer.
const flowCancels = 8

// CancelFlow cancels a flow on behalf of by: every job of it that is queued, waiting (a delay,
// a retry) or running ends canceled, and no job of it starts afterwards, on any host. It marks
// the flow first, then cancels each job its records list; a job taken after the mark sees it
// when it is claimed.
func (c *Client) CancelFlow(ctx context.Context, flow, by string) (*FlowCanceled, error) {
	if err := checkJobID(flow); err != nil {
		return nil, err
	}
	sums, err := c.Jobs.Summaries(ctx, jobs.Filter{Flow: flow})
	if err != nil {
		return nil, err
	}
	if len(sums) == 0 {
		return nil, fmt.Errorf("flow %s: %w (no job of it is recorded; list flows with `host jobs`)", flow, jobs.ErrNotFound)
	}
	if err := c.Jobs.CancelFlow(ctx, flow, by); err != nil {
		return nil, err
	}
	// Listed again after the mark: a job claimed before it is in this list.
	if sums, err = c.Jobs.Summaries(ctx, jobs.Filter{Flow: flow}); err != nil {
		return nil, err
	}
	out := &FlowCanceled{Flow: flow, Failed: map[string]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, flowCancels)
	for _, s := range sums {
		if s.Status.Final() {
			continue
		}
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			done, err := c.CancelAs(ctx, s.ID, by)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out.Canceled = append(out.Canceled, done)
			case !errors.Is(err, ErrFinished) && !errors.Is(err, ErrUnknownJob):
				out.Failed[s.ID] = err.Error()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(out.Canceled, func(a, b *Canceled) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
